// Loads of the matrices' weights, one set per weight format (the host defines WEIGHT_F32, WEIGHT_F16,
// WEIGHT_Q8_0 or WEIGHT_Q4_0: DeviceWeightLayout in weight_format.hpp). Every row product reads its weights through
// these, so a format is added here, not in each kernel:
//   weight_t               the element type a weight pointer points to
//   WEIGHT_ROW(w, row, n)  row `row` of a matrix of rows of n elements
//   ROW_ELEMENT(w, j, n)   element j of a row of n elements, as a float
// The formats whose elements are floats on their own (FLOAT_WEIGHTS: f32, f16) also have
//   WEIGHT(w, j)           element j of a row, as a float
//   WEIGHT4(w, j4)         elements 4 j4 .. 4 j4 + 3 of a row, as a float4
//   WEIGHTV(w, j)          floatv elements from j (CPU families)
//   WEIGHTW(w, j)          floatw elements from j (CPU families: sixteen)
// which dot.cl's row products read, and the spans GPU shapes' lanes load (below). The quantized formats
// (QUANTIZED_WEIGHTS: Q8_0, Q4_0) have
//   WEIGHT_SCALES(w, n)    a row's scales, read with SCALE(s, g) (group g's, as a float) and SCALE4(s, g)
//   weight_int(w, groups, g, k)  the int8 weights 4 k .. 4 k + 3 of group g of a row, as one int
// which dot_quantized.cl's and prefill_quantized.cl's integer dot products read.
// The norms' weights, the embedding rows written to x and the KV cache stay floats.
#if !defined(WEIGHT_F32) && !defined(WEIGHT_F16) && !defined(WEIGHT_Q8_0) && !defined(WEIGHT_Q4_0)
#define WEIGHT_F32  // (the default only keeps the program buildable on its own)
#endif

#if defined(WEIGHT_F32) || defined(WEIGHT_F16)
#define FLOAT_WEIGHTS
#define ROW_ELEMENT(w, j, n) WEIGHT(w, j)
#endif

#ifdef WEIGHT_F32
typedef float weight_t;
#define WEIGHT_ROW(w, row, n) ((w) + (size_t)(row) * (n))
#define WEIGHT(w, j) ((w)[j])
#define WEIGHT4(w, j4) vload4(j4, w)
#define WEIGHTV(w, j) vloadv((w) + (j))
#if ROW_THREADS == 1
#define WEIGHTW(w, j) vloadw((w) + (j))
#endif
#endif

// IEEE halves, widened exactly as they load (vload_half is core OpenCL 1.2, no extension): the same
// arithmetic as f32 on the widened weights, which is the reference's for f16.
#ifdef WEIGHT_F16
typedef half weight_t;
#define WEIGHT_ROW(w, row, n) ((w) + (size_t)(row) * (n))
#define WEIGHT(w, j) vload_half(j, w)
#define WEIGHT4(w, j4) vload_half4(j4, w)
#if VECTOR_WIDTH == 16
#define WEIGHTV(w, j) vload_half16(0, (w) + (j))
#else
#define WEIGHTV(w, j) vload_half(0, (w) + (j))
#endif
#if ROW_THREADS == 1
#define WEIGHTW(w, j) vload_half16(0, (w) + (j))
#endif
#endif

// A GPU shape's lane loads a row's float weights a span at a time (dot.cl):
//   weight_span_t          a span as loaded
//   WEIGHT_SPAN_AT(w, s)   span s from w, which is 4-byte aligned (span_head: where a row's first span starts)
//   WEIGHT_SPAN_ZERO       a span of zeros
//   span_dot(sum, v, in, s) sum plus span v's products with in[WEIGHT_SPAN s ..], in the elements' order
//   span_head(w)           the weights before the first 4-byte boundary at or after w
// The per-op kernels take halves in pairs, one aligned 4-byte load as for a float, so that they move as
// many bytes per load instruction as floats do. So does the token kernel (FEW_GROUPS) where the host
// defines TOKEN_HALF_PAIRS (KernelSet::token_program: PTX widens them and every row is whole pairs):
// widened as they load, its batches of pairs would hold twice the registers its cap allows; elsewhere it
// takes them one at a time. The host knows it as DeviceWeightLayout::span.
#if defined(WEIGHT_F16) && (!defined(FEW_GROUPS) || defined(TOKEN_HALF_PAIRS))
#define WEIGHT_SPAN 2
#define span_head(w) ((int)((size_t)(w) >> 1) & 1)
#ifdef INLINE_PTX
// On NVIDIA the span stays as loaded, a 32-bit word, until PTX widens its halves (cvt.f32.f16, exact).
typedef uint weight_span_t;
#define WEIGHT_SPAN_AT(w, s) (((__global const uint*)(w))[s])
#define WEIGHT_SPAN_ZERO 0u
inline float span_dot(float sum, uint v, __local const float* in, int s) {
    float lo, hi;
    __asm__("{ .reg .b16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }"
            : "=f"(lo), "=f"(hi) : "r"(v));
    sum += lo * in[2 * s];
    return sum + hi * in[2 * s + 1];
}
#else
typedef float2 weight_span_t;
#define WEIGHT_SPAN_AT(w, s) vload_half2(s, w)
#define WEIGHT_SPAN_ZERO ((float2)(0.0f))
inline float span_dot(float sum, float2 v, __local const float* in, int s) {
    sum += v.x * in[2 * s];
    return sum + v.y * in[2 * s + 1];
}
#endif
#elif defined(FLOAT_WEIGHTS)
#define WEIGHT_SPAN 1
typedef float weight_span_t;
#define WEIGHT_SPAN_AT(w, s) WEIGHT(w, s)
#define WEIGHT_SPAN_ZERO 0.0f
inline float span_dot(float sum, float v, __local const float* in, int s) { return sum + v * in[s]; }
#define span_head(w) 0
#endif

// runq.c's Q8_0 (and GGUF's, its half scales widened): GROUP_SIZE consecutive weights of a row share an
// fp32 scale; a weight is the int8 value times its group's scale. On the device a matrix is its rows one
// after the other, each row its n values (bytes) and then its n / GROUP_SIZE scales (WeightStaging writes
// them so: DeviceWeightLayout). A row's values are read Q8_WORD bytes (4, 8 or 16, dividing GROUP_SIZE) at
// a time, a word, so groups hold a multiple of 4 weights (the host refuses others). Groups lie in runs of
// Q8_INTERLEAVE whose words are interleaved (word 0 of each group of the run, then word 1 of each, ...; the
// row's last run may be shorter): the GPU family gives each of a row's lanes a group, and its lanes then
// read consecutive words, whole memory transactions, where a group apiece would have them GROUP_SIZE bytes
// apart. With Q8_INTERLEAVE 1 (CPU families) a group's weights are consecutive. The staged input
// (dot_quantized.cl) and the prompt's quantized rows (prefill_quantized.cl) lie as the rows do, for Q4_0's weights too
// (as plain rows of 16-byte words: a Q4_0 block's nibbles are one such word).
#if defined(WEIGHT_Q8_0) || defined(WEIGHT_Q4_0)
#define QUANTIZED_WEIGHTS
#if GROUP_SIZE % 4 != 0
#error "Q8_0 on the device needs groups of a multiple of 4 weights"
#endif
#ifdef WEIGHT_Q4_0
#define Q8_INTERLEAVE 1
#define Q8_WORD 16
#define Q4_IN_FLIGHT 2  // a GPU lane's groups loaded at once (dot_quantized.cl's q8_dot)
#endif
#ifndef Q8_INTERLEAVE
#define Q8_INTERLEAVE 1
#endif
#ifndef Q8_WORD
#define Q8_WORD 4
#endif
#if GROUP_SIZE % Q8_WORD != 0 || Q8_WORD % 4 != 0
#error "Q8_0's words are 4-byte multiples that divide a group"
#endif
#define Q8_ROW_BYTES(n) ((n) + 4 * ((n) / GROUP_SIZE))
#define Q8_ROW(x, row, n) ((x) + (size_t)(row) * Q8_ROW_BYTES(n))
#define Q8_SCALES(x, n) ((__global const float*)((x) + (n)))  // of a row

// The word (in words from the row's first) holding weights Q8_WORD k .. Q8_WORD k + Q8_WORD - 1 of group
// g of a row of `groups` groups.
inline int q8_word(int groups, int g, int k) {
    const int run = g / Q8_INTERLEAVE * Q8_INTERLEAVE;  // the run's first group
    return run * (GROUP_SIZE / Q8_WORD) + k * min(Q8_INTERLEAVE, groups - run) + (g - run);
}
// The int (4 bytes, from the row's first) holding weights 4 k .. 4 k + 3 of group g.
inline int q8_int(int groups, int g, int k) {
    return q8_word(groups, g, k / (Q8_WORD / 4)) * (Q8_WORD / 4) + k % (Q8_WORD / 4);
}
// The byte holding element j of a row of n weights.
inline int q8_byte(int n, int j) {
    const int i = j % GROUP_SIZE;
    return 4 * q8_int(n / GROUP_SIZE, j / GROUP_SIZE, i / 4) + i % 4;
}
#endif

#ifdef WEIGHT_Q8_0
typedef char weight_t;
#define WEIGHT_ROW(w, row, n) Q8_ROW(w, row, n)
#define WEIGHT_SCALES(w, n) Q8_SCALES(w, n)
typedef __global const float* scales_t;
#define SCALE(s, g) ((s)[g])
#define SCALE4(s, g) vload4(0, (s) + (g))
inline int weight_int(__global const weight_t* w, int groups, int g, int k) {
    return ((__global const int*)w)[q8_int(groups, g, k)];
}
// runq.c's dequantization: the value times its group's scale.
#define ROW_ELEMENT(w, j, n) ((float)(w)[q8_byte(n, j)] * Q8_SCALES(w, n)[(j) / GROUP_SIZE])
#endif

// ggml's Q4_0 (GROUP_SIZE 32, always under its rule, Q8_GGML): a block's weights are (q - 8) x d, q a
// nibble and d a half. On the device a matrix is its rows one after the other, each row its blocks' 16
// bytes of nibbles (byte j: element j in the low nibble, j + 16 in the high one) and then its blocks'
// halves (DeviceWeightLayout): rows of 18 n / 32 bytes, so a row starts on a 2-byte boundary only where
// its blocks are odd in number, and its nibbles are then read by halves.
#ifdef WEIGHT_Q4_0
#if GROUP_SIZE != 32
#error "Q4_0's blocks hold 32 weights"
#endif
typedef uchar weight_t;
#define Q4_ROW_BYTES(n) ((n) / 2 + (n) / 16)
#define WEIGHT_ROW(w, row, n) ((w) + (size_t)(row) * Q4_ROW_BYTES(n))
#define WEIGHT_SCALES(w, n) ((__global const half*)((w) + (n) / 2))
typedef __global const half* scales_t;
#define SCALE(s, g) vload_half(g, s)
#define SCALE4(s, g) vload_half4(0, (s) + (g))
// Int k (0 .. 3) of block g's nibbles, and all four.
inline int q4_word(__global const weight_t* w, int g, int k) {
    __global const weight_t* at = w + 16 * g + 4 * k;
    return ((size_t)at & 3) == 0 ? *(__global const int*)at : as_int(vload2(0, (__global const ushort*)at));
}
inline int4 q4_words(__global const weight_t* w, int g) {
    __global const weight_t* at = w + 16 * g;
    return ((size_t)at & 3) == 0 ? vload4(0, (__global const int*)at) : as_int4(vload8(0, (__global const ushort*)at));
}
// The four int8 values q - 8 of the low (high = 0) or high nibbles of a word: q ^ 8 is q - 8 as a 4-bit
// two's complement, whose sign bit then fills its byte's upper half.
inline int q4_values(int word, int high) {
    const int t = ((word >> (4 * high)) & 0x0f0f0f0f) ^ 0x08080808;
    return t | (t & 0x08080808) * 0x1e;
}
// Weights 4 k .. 4 k + 3 of a block are the low nibbles of its int k (k < 4), 16 + 4 k' .. the high ones of int k'.
inline int weight_int(__global const weight_t* w, int groups, int g, int k) {
    return q4_values(q4_word(w, g, k % 4), k / 4);
}
// Element j of a row: in block g = j / 32, the low nibble of byte i for i = j % 32 < 16, else the high one
// of byte i - 16 (remainders as products: see attention.cl).
inline float q4_element(__global const weight_t* w, int j, int n) {
    const int g = j / 32, i = j - 32 * g, high = i / 16;
    return (float)(((w[16 * g + (i - 16 * high)] >> (4 * high)) & 15) - 8) * SCALE(WEIGHT_SCALES(w, n), g);
}
#define ROW_ELEMENT(w, j, n) q4_element(w, j, n)
#endif
