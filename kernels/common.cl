// Helpers shared by every kernel file (embedded first). Build-time shape, chosen per device by the host:
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
// 16 floats from global memory at any float's alignment. PoCL (3.1) compiles vload16 into eight 8-byte
// loads and shuffles per call, which held the CPU shape's rows well below the memory's speed; clang's
// vector type with a float's alignment is one unaligned 64-byte load (stories15M's classifier on the
// 2-core development machine: 0.94-1.09 -> 0.60-0.68 ms at best; docs/benchmarks.md).
#ifdef __clang__
typedef float floatv_unaligned __attribute__((ext_vector_type(16), aligned(4)));
#define vloadv(p) (*(__global const floatv_unaligned*)(p))
#define vstorev(v, p) (*(__global floatv_unaligned*)(p) = (v))
#else
#define vloadv(p) vload16(0, p)
#define vstorev(v, p) vstore16(v, 0, p)
#endif
inline float hsum(float16 v) {
    const float8 a = v.lo + v.hi;
    const float4 b = a.lo + a.hi;
    const float2 c = b.lo + b.hi;
    return c.x + c.y;
}
#elif VECTOR_WIDTH == 1
// Loops written over elementwise floatv steps run as scalar loops.
typedef float floatv;
#define vloadv(p) (*(p))
#define vstorev(v, p) (*(p) = (v))
#else
#error VECTOR_WIDTH must be 1 or 16
#endif
// The vectorized loops below assume one work-item per row.
#if VECTOR_WIDTH > 1 && ROW_THREADS != 1
#error VECTOR_WIDTH > 1 needs ROW_THREADS == 1
#endif
#define ROWS_PER_GROUP (LOCAL / ROW_THREADS)

// FEW_GROUPS: the host defines it for the token kernel, whose launch has only one or two work-groups per
// compute unit, so that each wait on memory shows: its unit functions issue loads ahead of where they are
// needed (row_pair, the residual and rotation reads below, attention's first values). Per-op launches hide
// those waits behind many work-groups, and the loads ahead cost them registers: measured slower or no faster
// there (docs/benchmarks.md).

// Programs built as OpenCL C 2.0 or later (the host defines DEVICE_FENCES for them: the token kernel, and
// GPU shapes where the compiler takes it) can publish one work-group's writes to the others while they
// run. OpenCL 1.2's mem_fence orders only within a work-group (NVIDIA compiles it to membar.cta, and
// another compute unit may then read a stale line from its own cache: measured on the H200,
// docs/benchmarks.md); a fence of device scope is the one that publishes writes to the whole device.
#ifdef DEVICE_FENCES
#define DEVICE_FENCE() atomic_work_item_fence(CLK_GLOBAL_MEM_FENCE, memory_order_acq_rel, memory_scope_device)

// Whether this work-group is the last of `count` to arrive at `counter`; if so, every other one's global
// writes before its arrival are visible to it, and the counter is back at 0 for its next use. Lets the
// last of a step's work-groups finish the step (combine the others' partial results) without a launch or
// a grid barrier of its own. Every work-item must call it; `last` is the group's local flag. A null
// counter counts nothing (false), for callers that must reach its barriers either way.
inline int last_to_arrive(volatile __global uint* counter, uint count, __local int* last) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        *last = 0;
        if (counter) {
            DEVICE_FENCE();
            *last = atomic_inc(counter) == count - 1;
            if (*last) *counter = 0;  // nobody else counts here until the step's next use
            DEVICE_FENCE();
        }
    }
    // Global as well: the other work-items read the other work-groups' writes after it.
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    return *last;
}
#endif

// NVIDIA (the host defines WARP_SHUFFLE where the device's warps are 32 work-items, its compiler takes
// inline PTX and a work-group is whole warps: KernelSet::warp_shuffles): the work-items of a warp, 32
// consecutive local ids, read each other's registers (shfl.sync) without local memory or a barrier. The
// reductions below use it where they stay within a warp, adding the same pairs in the same order as their
// trees through local memory, so the results are the same bits (tests: WarpShuffles). Each step of a
// reduction through local memory is a barrier, and the token kernel's steps are chains of them: with
// shuffles stories15M ran 5 % faster on the H200 (docs/benchmarks.md).
#ifdef WARP_SHUFFLE
// `value` of the work-item whose lane in the warp is this one's XOR `mask`. Every work-item of the warp must call it.
inline float shuffle_xor(float value, int mask) {
    float other;
    __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(other) : "f"(value), "r"(mask));
    return other;
}
// `value` of the warp's first work-item.
inline float lane0(float value) {
    float first;
    __asm__ volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=f"(first) : "f"(value));
    return first;
}
// Sums over aligned runs of `width` work-items within a warp (a power of two up to 32), by butterfly: at
// each step a work-item adds its partner's sum, so every work-item ends with the run's sum, the tree's
// pairs summed in the tree's order (lane 0: (v0 + v16) + (v8 + v24) + ... for 32).
inline float warp_sum(float value, int width) {
    for (int s = width / 2; s > 0; s >>= 1) value += shuffle_xor(value, s);
    return value;
}
inline float warp_max(float value, int width) {
    for (int s = width / 2; s > 0; s >>= 1) value = fmax(value, shuffle_xor(value, s));
    return value;
}
#if ROW_THREADS <= 32
#define ROW_SHUFFLE
#endif
#endif

// Sum of `value` over the ROW_THREADS consecutive work-items that share a row; every work-item of the
// group must call it (it contains barriers when ROW_THREADS > 1, unless a row is within a warp).
inline float row_sum(float value, __local float* scratch) {
#if ROW_THREADS == 1
    return value;
#elif defined(ROW_SHUFFLE)
    return warp_sum(value, ROW_THREADS);
#else
    const int lid = get_local_id(0);
    const int lane = lid % ROW_THREADS;
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if (lane < s) scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = scratch[lid - lane];
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch is reused by the next call
    return total;
#endif
}

#ifdef FEW_GROUPS
// row_sum of both components at once (one tree of barriers for the two); scratch holds 2 * LOCAL floats.
inline float2 row_sum2(float2 value, __local float* scratch) {
#if ROW_THREADS == 1
    return value;
#elif defined(ROW_SHUFFLE)
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) value += (float2)(shuffle_xor(value.x, s), shuffle_xor(value.y, s));
    return value;
#else
    const int lid = get_local_id(0);
    const int lane = lid % ROW_THREADS;
    __local float* other = scratch + LOCAL;
    scratch[lid] = value.x;
    other[lid] = value.y;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = ROW_THREADS / 2; s > 0; s >>= 1) {
        if (lane < s) {
            scratch[lid] += scratch[lid + s];
            other[lid] += other[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float2 total = (float2)(scratch[lid - lane], other[lid - lane]);
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch is reused by the next call
    return total;
#endif
}
#endif

// Sum (is_max == 0) or maximum (is_max != 0) of `value` over the whole work-group: a tree through local
// memory, level s combining element i with element i + s. With warp shuffles the same tree in two parts:
// the levels that cross warps (s >= 32) each work-item computes for its lane from the warps' values
// after one barrier, and the rest by shuffles; the same pairs, so the same bits.
inline float group_reduce(float value, int is_max, __local float* scratch) {
    const int lid = get_local_id(0);
    scratch[lid] = value;
    barrier(CLK_LOCAL_MEM_FENCE);
#ifdef WARP_SHUFFLE
    float v[LOCAL / 32];  // lane lid % 32 of each warp
#pragma unroll
    for (int w = 0; w < LOCAL / 32; w++) v[w] = scratch[lid % 32 + 32 * w];
#pragma unroll
    for (int m = LOCAL / 64; m > 0; m >>= 1)
#pragma unroll
        for (int w = 0; w < m; w++) v[w] = is_max ? fmax(v[w], v[w + m]) : v[w] + v[w + m];
    // Lane 0's, as the tree's: fmax of zeros of both signs may differ in the other lanes.
    const float total = lane0(is_max ? warp_max(v[0], 32) : warp_sum(v[0], 32));
#else
    for (int s = LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s) scratch[lid] = is_max ? fmax(scratch[lid], scratch[lid + s]) : scratch[lid] + scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float total = scratch[0];
#endif
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}

// RMSNorm's scale from the sum of squares ss of n elements: 1/sqrt(ss/n + eps), in run.c's steps.
inline float rms_from_sum(float ss, int n) {
    ss /= (float)n;
    ss += 1e-5f;
    return 1.0f / sqrt(ss);
}

// RMSNorm's scale 1/sqrt(mean(x^2) + eps), as run.c computes it. With ROW_THREADS == 1 every
// work-item computes it alone (no barrier; with VECTOR_WIDTH 1 bit-identical to run.c); otherwise
// the work-group computes it together.
inline float rms_scale(__global const float* x, int n, __local float* scratch) {
    float ss = 0.0f;
#if ROW_THREADS == 1 && VECTOR_WIDTH == 1
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
#elif ROW_THREADS == 1
    floatv acc = (floatv)(0.0f);
    int j = 0;
    for (; j + VECTOR_WIDTH <= n; j += VECTOR_WIDTH) {
        const floatv v = vloadv(x + j);
        acc = mad(v, v, acc);
    }
    ss = hsum(acc);
    for (; j < n; j++) ss = mad(x[j], x[j], ss);
#else
    for (int j = get_local_id(0); j < n; j += LOCAL) ss += x[j] * x[j];
    ss = group_reduce(ss, 0, scratch);
#endif
    return rms_from_sum(ss, n);
}

// Writes rmsnorm(x) * weight to out; called by one work-group so the normalized vector can be
// inspected (--compare-cpu) without another kernel.
inline void write_norm(__global float* out, __global const float* x, __global const float* weight, float ss, int n) {
    for (int j = get_local_id(0); j < n; j += LOCAL) out[j] = weight[j] * (ss * x[j]);
}

// This lane's part of dot(w, in) over n elements. With ROW_THREADS == 1 and VECTOR_WIDTH 1 this is
// run.c's matmul loop.
inline float partial_dot(__global const float* w, __global const float* in, int n, int lane) {
    float sum = 0.0f;
#if ROW_THREADS == 1 && VECTOR_WIDTH == 1
    for (int j = 0; j < n; j++) sum += w[j] * in[j];
#elif ROW_THREADS == 1
    floatv acc = (floatv)(0.0f);
    int j = 0;
    for (; j + VECTOR_WIDTH <= n; j += VECTOR_WIDTH) acc = mad(vloadv(w + j), vloadv(in + j), acc);
    sum = hsum(acc);
    for (; j < n; j++) sum = mad(w[j], in[j], sum);
#else
    const int n4 = n / 4;
    for (int j = lane; j < n4; j += ROW_THREADS) {
        const float4 a = vload4(j, w), b = vload4(j, in);
        sum += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    for (int j = 4 * n4 + lane; j < n; j += ROW_THREADS) sum += w[j] * in[j];
#endif
    return sum;
}

// As partial_dot, with the input normalized on the fly: in[j] = weight[j] * (ss * x[j]), the exact
// expression run.c's rmsnorm stores, so fusing the norm changes no bit.
inline float partial_dot_normed(__global const float* w, __global const float* x, __global const float* weight,
                                float ss, int n, int lane) {
    float sum = 0.0f;
#if ROW_THREADS == 1 && VECTOR_WIDTH == 1
    for (int j = 0; j < n; j++) sum += w[j] * (weight[j] * (ss * x[j]));
#elif ROW_THREADS == 1
    floatv acc = (floatv)(0.0f);
    int j = 0;
    for (; j + VECTOR_WIDTH <= n; j += VECTOR_WIDTH)
        acc = mad(vloadv(w + j), vloadv(weight + j) * (ss * vloadv(x + j)), acc);
    sum = hsum(acc);
    for (; j < n; j++) sum = mad(w[j], weight[j] * (ss * x[j]), sum);
#else
    const int n4 = n / 4;
    for (int j = lane; j < n4; j += ROW_THREADS) {
        const float4 a = vload4(j, w), g = vload4(j, weight), v = vload4(j, x);
        const float4 b = g * (ss * v);
        sum += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
    }
    for (int j = 4 * n4 + lane; j < n; j += ROW_THREADS) sum += w[j] * (weight[j] * (ss * x[j]));
#endif
    return sum;
}

// GPU shapes: the work-group copies its input vector (normalized on the way when `weight` is given)
// into local memory once, so the rows' dot products read it from there instead of re-reading x, the norm
// weights and doing the normalization per element for every row. Needs every work-item.
inline void stage_input(__local float* staged, __global const float* x, __global const float* weight, float ss,
                        int n) {
    for (int j = get_local_id(0); j < n; j += LOCAL) staged[j] = weight ? weight[j] * (ss * x[j]) : x[j];
    barrier(CLK_LOCAL_MEM_FENCE);
}

inline float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// Weight loads a work-item issues before it uses the first of them: a matrix with few rows (wo and w2,
// every matrix of a small model) gives each compute unit too few work-items to hide memory latency one
// load at a time. The host picks it per launch (dot_batch in kernel_set.hpp; the token kernel's:
// KernelSet::token_program). The sum is formed in the simple loop's order.
#ifndef DOT_BATCH
#define DOT_BATCH 8
#endif

// The row's lanes read consecutive floats (lane, lane + ROW_THREADS, ...), so each load instruction of a
// warp reads whole 32-byte sectors (with 8 or more lanes and rows of a multiple of 8 floats, as the GPU
// shapes and real models have); a float4 per lane is compiled by NVIDIA into four scalar loads at a
// 16-byte stride, each instruction touching four times the sectors for the same bytes.
inline float dot_staged_from(__global const float* w, __local const float* in, int n, int j, float sum) {
    for (; j + (DOT_BATCH - 1) * ROW_THREADS < n; j += DOT_BATCH * ROW_THREADS) {
        float a[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) a[k] = w[j + k * ROW_THREADS];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) sum += a[k] * in[j + k * ROW_THREADS];
    }
    // The rest (fewer elements than a batch for this lane) as one more batch of loads issued together,
    // not one load per trip to memory: most of a small model's rows is rest.
    if (j < n) {
        float a[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) a[k] = j + k * ROW_THREADS < n ? w[j + k * ROW_THREADS] : 0.0f;
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++)
            if (j + k * ROW_THREADS < n) sum += a[k] * in[j + k * ROW_THREADS];
    }
    return sum;
}

#ifdef FEW_GROUPS
// The token kernel stages a step's input in the work-group's first unit of the step, after that unit has
// issued its first batch of weight loads (they do not depend on the input), so that the two waits on
// memory overlap rather than follow each other. A unit learns it from a negative staged_n: the input is
// not staged yet, and row_dot and row_pair stage it. (token.cl defines it: n floats of x, normalized with
// `weight` when given.)
void stage_step_input(__local float* staged, __global const float* x, __global const float* weight, int n,
                      __local float* scratch);

// The lane's first batch of a row, masked as the rest is, and its sum: dot_staged_from's first trip,
// apart, so that it can be loaded before the input is staged.
inline void load_first_batch(__private float* a, __global const float* w, int n, int lane) {
#pragma unroll
    for (int k = 0; k < DOT_BATCH; k++) a[k] = lane + k * ROW_THREADS < n ? w[lane + k * ROW_THREADS] : 0.0f;
}
inline float first_batch_dot(__private const float* a, __local const float* in, int n, int lane) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < DOT_BATCH; k++)
        if (lane + k * ROW_THREADS < n) sum += a[k] * in[lane + k * ROW_THREADS];
    return sum;
}

// dot_staged_from of two rows, wa's in x and wb's in y, each batch's loads of both rows issued together: a
// unit that needs two rows (w1's and w3's, a RoPE pair) would otherwise wait on memory twice, the second
// row's loads held behind the first row's reduction. Each sum is formed in dot_staged_from's order.
inline float2 dot2_staged_from(__global const float* wa, __global const float* wb, __local const float* in, int n,
                               int j, float2 sum) {
    for (; j + (DOT_BATCH - 1) * ROW_THREADS < n; j += DOT_BATCH * ROW_THREADS) {
        float a[DOT_BATCH], b[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) {
            a[k] = wa[j + k * ROW_THREADS];
            b[k] = wb[j + k * ROW_THREADS];
        }
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) {
            sum.x += a[k] * in[j + k * ROW_THREADS];
            sum.y += b[k] * in[j + k * ROW_THREADS];
        }
    }
    if (j < n) {
        float a[DOT_BATCH], b[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) {
            const int inside = j + k * ROW_THREADS < n;
            a[k] = inside ? wa[j + k * ROW_THREADS] : 0.0f;
            b[k] = inside ? wb[j + k * ROW_THREADS] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++)
            if (j + k * ROW_THREADS < n) {
                sum.x += a[k] * in[j + k * ROW_THREADS];
                sum.y += b[k] * in[j + k * ROW_THREADS];
            }
    }
    return sum;
}
#endif

// One row's dot product with the (normalized) input: from local memory when the work-group staged it
// (staged_n > 0, GPU shapes with room for the vector; FEW_GROUPS: staged_n < 0 stages it first), else
// straight from global memory.
inline float row_dot(__global const float* w, __global const float* x, __global const float* weight, float ss,
                     __local float* staged, int staged_n, int n, int lane, __local float* scratch) {
#ifdef FEW_GROUPS
    if (staged_n != 0) {
        float a[DOT_BATCH];
        load_first_batch(a, w, n, lane);
        if (staged_n < 0) stage_step_input(staged, x, weight, n, scratch);
        return dot_staged_from(w, staged, n, lane + DOT_BATCH * ROW_THREADS, first_batch_dot(a, staged, n, lane));
    }
#endif
    if (staged_n > 0) return dot_staged_from(w, staged, n, lane, 0.0f);
    return weight ? partial_dot_normed(w, x, weight, ss, n, lane) : partial_dot(w, x, n, lane);
}

// Two rows' dot products with the same input (x: wa's, y: wb's), summed over their lanes (row_sum). Builds
// with FEW_GROUPS load both rows together and reduce them in one tree (pairing took stories15M from 6019
// to 6365 tok/s on the H200); the per-op kernels take one row at a time, twice the loads in flight
// costing them registers (llama3.2-1b 621 -> 611, 7B 137.5 -> 136.0; docs/benchmarks.md). With
// FEW_GROUPS, scratch holds 2 * LOCAL floats.
inline float2 row_pair(__global const float* wa, __global const float* wb, __global const float* x,
                       __global const float* weight, float ss, __local float* staged, int staged_n, int n,
                       int lane, __local float* scratch) {
#ifdef FEW_GROUPS
    if (staged_n != 0) {
        float a[DOT_BATCH], b[DOT_BATCH];
        load_first_batch(a, wa, n, lane);
        load_first_batch(b, wb, n, lane);
        if (staged_n < 0) stage_step_input(staged, x, weight, n, scratch);
        const float2 first = (float2)(first_batch_dot(a, staged, n, lane), first_batch_dot(b, staged, n, lane));
        return row_sum2(dot2_staged_from(wa, wb, staged, n, lane + DOT_BATCH * ROW_THREADS, first), scratch);
    }
#endif
    const float a = row_sum(row_dot(wa, x, weight, ss, staged, staged_n, n, lane, scratch), scratch);
    const float b = row_sum(row_dot(wb, x, weight, ss, staged, staged_n, n, lane, scratch), scratch);
    return (float2)(a, b);
}

// A kernel's body written once, as a function of its work unit, for its own kernel and for the token
// kernel (token.cl), must still be compiled as that kernel's body: left to the inliner, clang (PoCL's
// compiler) emits them as calls even with one call site; forced, each kernel's code is what it was before
// the split (clang's PTX compared). NVIDIA's compiler inlines them either way. (A 7B slowdown first
// blamed on this was attention's register count: docs/benchmarks.md.)
#if defined(__has_attribute)
#if __has_attribute(always_inline)
#define UNIT_FUNCTION inline __attribute__((always_inline))
#endif
#endif
#ifndef UNIT_FUNCTION
#define UNIT_FUNCTION inline
#endif

// Work units (a work-group's worth of rows each) of a step with `rows` output rows.
#define UNITS(rows) (((rows) + ROWS_PER_GROUP - 1) / ROWS_PER_GROUP)
// The units of a per-op kernel's work-group. CPU shapes launch a few work-groups per core
// (KernelSet::rows), each taking a run of consecutive units, an equal share: PoCL pays for every
// work-group it schedules (about 10 ns: 0.3 ms of stories15M's 32000-row classifier with a group per
// row), and a group computes the norm's scale once for its run. GPU shapes launch a work-group per unit,
// and take exactly that one: the run's bounds, computed, cost the register-capped builds (llama3.2-1b
// 629 -> 625 tok/s on the H200).
#if ROW_THREADS == 1
inline int group_share(int units) {
    const int groups = (int)get_num_groups(0);
    return (units + groups - 1) / groups;
}
#define FOR_GROUP_UNITS(u, rows)                                                                          \
    for (int u = (int)get_group_id(0) * group_share(UNITS(rows)), end_ = min(UNITS(rows), u + group_share(UNITS(rows))); \
         u < end_; u++)
#else
#define FOR_GROUP_UNITS(u, rows) for (int u = (int)get_group_id(0), once_ = 1; once_; once_ = 0)
#endif

// The row this work-item works on in work unit `unit` (one of a run of them a work-group of a kernel of
// its own takes, one of many a work-group takes in turn in the token kernel) and its lane
// within the row. Rows past `rows` are clamped to the last one so that every work-item still reaches the
// barriers; the caller writes only when row_valid.
#define ROW_SETUP(unit, rows)                                             \
    const int lane = get_local_id(0) % ROW_THREADS;                       \
    const int row_unclamped = (unit) * ROWS_PER_GROUP + get_local_id(0) / ROW_THREADS; \
    const int row_valid = row_unclamped < (rows);                         \
    const int row = row_valid ? row_unclamped : (rows) - 1
