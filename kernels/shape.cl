// The build-time shape every kernel file is compiled for (embedded first), chosen per device by the host:
//   ROW_THREADS   work-items that cooperate on one output row (a power of two). 1 on CPUs: no
//                 local-memory reductions (slow on PoCL). GPUs use many and a tree reduction; with
//                 the input staged in local memory each reads every ROW_THREADS-th float of the row
//                 (without, when the input does not fit there, a float4 at a time).
//   VECTOR_WIDTH  with ROW_THREADS == 1, elements a work-item takes per step: 1 runs run.c's sequential
//                 loops in run.c's order (the "exact" shape, bit-identical to the reference); 16 hands
//                 the row to the CPU's SIMD units as float16 multiply-adds (the "cpu" shape).
//   LOCAL         work-group size (a power of two, a multiple of ROW_THREADS).
//   DOT_BATCH     GPU shapes: weight loads a work-item issues together (dot_batch in kernel_set.hpp; the
//                 token kernel's: KernelSet::token_program).

// run.c is compiled without FMA contraction; so are these kernels, so that the CPU shape reproduces its
// arithmetic exactly.
#pragma OPENCL FP_CONTRACT OFF

// Kernels keep clear of three faults of Oclgrind 21.10's uninitialized-value check, which CI runs: it
// crashes on a vector shuffle with an undefined lane, takes a shuffle's lane 11 for an undefined one, and
// cannot run LLVM's freeze (a / and % pair of the same operands compiles to one: see attention.cl).
// x + y for two lanes of one vector: written fma(x, 1.0f, y), exactly x + y, which LLVM leaves scalar (a
// sum of two lanes it turns into a shuffle with undefined lanes).
inline float add_lanes(float x, float y) { return fma(x, 1.0f, y); }
// v.hi and (float16)(lo, hi), taken as 64-bit lanes: a float16's are shuffles with lane 11, a ulong8's
// are not.
inline float8 upper_half(float16 v) { return as_float8(as_ulong8(v).hi); }
inline float16 join_halves(float8 lo, float8 hi) { return as_float16((ulong8)(as_ulong4(lo), as_ulong4(hi))); }

// The host always defines them (KernelSet); the defaults only keep the program buildable on its own.
#ifndef ROW_THREADS
#define ROW_THREADS 1
#endif
#ifndef LOCAL
#define LOCAL 8
#endif
#ifndef VECTOR_WIDTH
#define VECTOR_WIDTH 1
#endif

#if VECTOR_WIDTH == 16
typedef float16 floatv;
// 16 floats from global memory at any float's alignment. PoCL compiles vload16 into eight 8-byte loads
// and shuffles per call, which holds the CPU shape's rows well below the memory's speed; clang's vector
// type with a float's alignment is one unaligned 64-byte load.
#ifdef __clang__
typedef float floatv_unaligned __attribute__((ext_vector_type(16), aligned(4)));
#define vloadv(p) (*(__global const floatv_unaligned*)(p))
#define vstorev(v, p) (*(__global floatv_unaligned*)(p) = (v))
#else
#define vloadv(p) vload16(0, p)
#define vstorev(v, p) vstore16(v, 0, p)
#endif
#elif VECTOR_WIDTH == 1
// Loops written over elementwise floatv steps run as scalar loops.
typedef float floatv;
#define vloadv(p) (*(p))
#define vstorev(v, p) (*(p) = (v))
#else
#error VECTOR_WIDTH must be 1 or 16
#endif
// CPU families: 16 independent elements at a time (floatw, from global memory at any float's alignment),
// for loops whose lanes are separate outputs, each summing its own terms in order, so that even the
// exact shape takes them: the same bits as one element at a time.
#if ROW_THREADS == 1
typedef float16 floatw;
#ifdef __clang__
typedef float floatw_unaligned __attribute__((ext_vector_type(16), aligned(4)));
#define vloadw(p) (*(__global const floatw_unaligned*)(p))
#define vstorew(v, p) (*(__global floatw_unaligned*)(p) = (v))
#else
#define vloadw(p) vload16(0, p)
#define vstorew(v, p) vstore16(v, 0, p)
#endif
#endif
// The vectorized loops below assume one work-item per row.
#if VECTOR_WIDTH > 1 && ROW_THREADS != 1
#error VECTOR_WIDTH > 1 needs ROW_THREADS == 1
#endif
#define ROWS_PER_GROUP (LOCAL / ROW_THREADS)

// A work-group of one work-item has no other work-item to wait for or to order its memory with at a
// barrier, and PoCL spends most of a kernel's first-launch compile splitting it at the barriers it keeps:
// in such builds (the CPU families' shapes) barrier() is nothing. (Work-groups still publish to each
// other through grid_sync.cl's device-scope fences and atomics.)
#if LOCAL == 1
#define barrier(flags) ((void)(flags))
#endif

// The shape families (LaunchShape::family in kernel_set.hpp, by the same rule): SHAPE_EXACT and SHAPE_CPU
// give each row one work-item (run.c's sequential loops; float16 steps), SHAPE_GPU many.
#define SHAPE_EXACT 1
#define SHAPE_CPU 2
#define SHAPE_GPU 3
#if ROW_THREADS > 1
#define SHAPE_FAMILY SHAPE_GPU
#elif VECTOR_WIDTH == 1
#define SHAPE_FAMILY SHAPE_EXACT
#else
#define SHAPE_FAMILY SHAPE_CPU
#endif
// ORDERED_SUMS (LaunchShape::ordered; the host defines it for quantized weights only): the GPU family with
// every float sum in run.c's order, for run.c's bits. A row's lanes keep their groups' terms in local memory
// for one work-item to add in order (dot_quantized.cl), one work-item adds RMSNorm's squares (dot_gpu.cl),
// and attention forms each score, the softmax's sum and each output element as one chain (attention.cl).
// Such builds launch neither the token kernel nor prefill's GEMMs (KernelSet::prefill_possible).
#if defined(ORDERED_SUMS) && SHAPE_FAMILY != SHAPE_GPU
#error ORDERED_SUMS is a GPU shape's
#endif

// FEW_GROUPS: the host defines it for the token kernel, whose launch has only one or two work-groups per
// compute unit, so that each wait on memory shows: its unit functions issue loads ahead of where they are
// needed (row_pair, the residual and rotation reads, attention's first values). Per-op launches hide
// those waits behind many work-groups, and the loads ahead would cost them registers.
