// Every family's row products for quantized weights (QUANTIZED_WEIGHTS: weights.cl's Q8_0 and Q4_0), as
// runq.c's matmul computes them (or ggml's: Q8_GGML below): the input quantized once per work-group into local memory
// (stage_input), then per row the sum over its groups of a term (Q8_TERM) of ival, the group's exact
// integer dot product, and the two scales. A row's lane takes every ROW_THREADS-th group and adds its
// terms in order, so with one lane per row (the CPU families) the sum is the reference's, bit for bit;
// the GPU family adds its lanes' sums in a tree (row_sum). The same three functions as dot.cl's:
// stage_input, row_dot and row_pair.
#ifdef QUANTIZED_WEIGHTS
#if defined(WEIGHT_Q4_0) && defined(FEW_GROUPS)
#define Q4_TOKEN  // Q4_0 in the token kernel: its own row products (q4_dot below)
#endif

// The rule of the format (QuantRule; the host defines Q8_GGML for ggml's). Both take a group's scale as
// max |v| / 127. runq.c's quantize: q = round(v / scale), the scale kept as it is; a group's term
// ((float)ival * w_scale) * x_scale. ggml's quantize_row_q8_0_ref: q = round(v * id), id = 1 / scale (0
// for a zero scale), the scale kept rounded to a half; vec_dot_q8_0_q8_0's term (float)ival * (w_scale *
// x_scale). q8_step(scale) is what quantized() applies to a value; Q8_TERM takes scalars or vectors.
#ifdef Q8_GGML
// f rounded to the nearest half (ties to even) and widened back, as ggml's GGML_FP32_TO_FP16 stores it.
inline float half_rounded(float f) {
    const uint bits = as_uint(f), magnitude = bits & 0x7fffffffu, sign = bits & 0x80000000u;
    if (magnitude > 0x7f800000u) return f;                                 // NaN
    if (magnitude >= 0x477ff000u) return as_float(sign | 0x7f800000u);     // rounds past 65504: infinity
    if (magnitude < 0x38800000u) return rint(f * 0x1p24f) * 0x1p-24f;      // below 2^-14: multiples of 2^-24
    // 13 mantissa bits dropped, to nearest even; a carry into the exponent is the next power of two.
    const uint rest = magnitude & 0x1fffu;
    uint kept = magnitude & ~0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (kept & 0x2000u) != 0)) kept += 0x2000u;
    return as_float(sign | kept);
}
inline float q8_step(float scale) { return scale != 0.0f ? 1.0f / scale : 0.0f; }
inline float q8_kept(float scale) { return half_rounded(scale); }
#define Q8_APPLY(v, step) ((v) * (step))
#define Q8_TERM(ival, w_scale, x_scale) ((ival) * ((w_scale) * (x_scale)))
#else
inline float q8_step(float scale) { return scale; }
inline float q8_kept(float scale) { return scale; }
#define Q8_APPLY(v, step) ((v) / (step))
#define Q8_TERM(ival, w_scale, x_scale) ((ival) * (w_scale) * (x_scale))
#endif

// The staged input in local memory: its n / GROUP_SIZE scales, then its n values (chars) laid out as a
// row's (q8_int); Q4_TOKEN's as ints, int k of each of 32 consecutive groups, then int k + 1 of each, so
// that a row's lanes, a group each, read consecutive ints (distinct banks, no conflicts).
#define STAGED_VALUES(staged, n) ((__local char*)((staged) + (n) / GROUP_SIZE))
// The int holding the staged values 4 k .. 4 k + 3 of group g of `groups`.
#ifdef Q4_TOKEN
inline int staged_int(int groups, int g, int k) {
    const int run = g / 32 * 32;
    return run * (GROUP_SIZE / 4) + k * min(32, groups - run) + (g - run);
}
#else
#define staged_int q8_int
#endif

// (int8_t) round(Q8_APPLY(v, step)) as gcc compiles it on x86-64 (model_math.cpp's quantize): round()
// rounds halves away from zero; the float becomes an int32 (out of range or NaN: INT32_MIN), whose low
// byte is kept. Only degenerate scales (zero, subnormal or infinite group maxima) leave [-127, 127].
inline char quantized(float v, float step) {
    const float r = round(Q8_APPLY(v, step));
    const int whole = r >= -0x1p31f && r < 0x1p31f ? (int)r : INT_MIN;
    const int low = whole & 0xff;
    return (char)(low < 128 ? low : low - 256);
}

// The rule's quantize of the input into `staged`: per group of GROUP_SIZE, scale = max |v| / 127 (the
// division correctly rounded where the device offers it: KernelSet), q = quantized(v, q8_step(scale)) and
// the scale kept q8_kept(scale). The work-items take the input's words (4 consecutive values) in turn, so
// that a warp's loads are whole transactions. A maximum is a comparison, exact in any order; like runq.c's
// `val > wmax`, it never takes a NaN (for either rule). Needs every work-item.
inline float4 input_word(__global const float* x, __global const float* weight, float ss, int word) {
    const float4 v = vload4(word, x);
    return weight ? vload4(word, weight) * (ss * v) : v;
}
inline float larger(float wmax, float a) { return a > wmax ? a : wmax; }
inline float word_max(float4 v) {
    const float4 a = fabs(v);
    return larger(larger(larger(larger(0.0f, a.x), a.y), a.z), a.w);
}
inline char4 quantized4(float4 v, float step) {
    return (char4)(quantized(v.x, step), quantized(v.y, step), quantized(v.z, step), quantized(v.w, step));
}
inline void store_word(__local float* staged, float4 v, float step, int n, int word) {
    const int g = word / (GROUP_SIZE / 4);
    ((__local char4*)STAGED_VALUES(staged, n))[staged_int(n / GROUP_SIZE, g, word % (GROUP_SIZE / 4))] = quantized4(v, step);
}
#if defined(WARP_SHUFFLE) && GROUP_SIZE <= 128 && (GROUP_SIZE & (GROUP_SIZE - 1)) == 0
// In one pass: a group's GROUP_SIZE / 4 words are held by consecutive work-items of one warp, which take
// the group's maximum from each other's by butterfly and quantize their own word, read once. Every
// work-item takes every pass of the loop (a shuffle needs the whole warp); those past the input store
// nothing.
#define WORD_SCALES
// The scale of the group whose word v is (every work-item of the warp takes part).
inline float word_scale(float4 v) {
    float wmax = word_max(v);
    for (int s = GROUP_SIZE / 8; s > 0; s >>= 1) wmax = larger(wmax, shuffle_xor(wmax, s));
    return wmax / 127.0f;
}
// Word i of the n values, v, quantized into `staged` with its group's scale (every work-item of the warp
// calls it; those past the input store nothing).
inline void stage_word(__local float* staged, float4 v, int n, int i) {
    const float scale = word_scale(v);
    if (i >= n / 4) return;
    if (i % (GROUP_SIZE / 4) == 0) staged[i / (GROUP_SIZE / 4)] = q8_kept(scale);
    store_word(staged, v, q8_step(scale), n, i);
}
inline void stage_input(__local float* staged, __global const float* x, __global const float* weight, float ss, int n) {
    const int words = n / 4;
    for (int i = get_local_id(0); i - get_local_id(0) < words; i += LOCAL)
        stage_word(staged, i < words ? input_word(x, weight, ss, i) : (float4)(0.0f), n, i);
    barrier(CLK_LOCAL_MEM_FENCE);  // the rows read `staged`
}
#elif SHAPE_FAMILY != SHAPE_GPU && GROUP_SIZE % 16 == 0
// CPU families: a work-item takes whole groups in turn, 16 values at a time, each lane quantized as
// quantized() does one value: the same bits.
inline char16 quantized16(floatw v, float step) {
    const floatw r = round(Q8_APPLY(v, step));
    const int16 in_range = r >= -0x1p31f && r < 0x1p31f;
    const int16 low = select((int16)(INT_MIN), convert_int16(select((floatw)(0.0f), r, in_range)), in_range) & 0xff;
    return convert_char16(select(low, low - 256, low >= 128));
}
inline void stage_input(__local float* staged, __global const float* x, __global const float* weight, float ss, int n) {
    __local char* values = STAGED_VALUES(staged, n);
    for (int g = get_local_id(0); g < n / GROUP_SIZE; g += LOCAL) {
        floatw v[GROUP_SIZE / 16];
        floatw lane_max = (floatw)(0.0f);
#pragma unroll
        for (int k = 0; k < GROUP_SIZE / 16; k++) {
            const int j = g * GROUP_SIZE + 16 * k;
            v[k] = weight ? vloadw(weight + j) * (ss * vloadw(x + j)) : vloadw(x + j);
            const floatw a = fabs(v[k]);
            lane_max = select(lane_max, a, a > lane_max);  // larger(), lane by lane
        }
        float wmax = 0.0f;
        for (int l = 0; l < 16; l++) wmax = larger(wmax, ((float*)&lane_max)[l]);
        const float scale = wmax / 127.0f;
        staged[g] = q8_kept(scale);
#pragma unroll
        for (int k = 0; k < GROUP_SIZE / 16; k++)
            vstore16(quantized16(v[k], q8_step(scale)), 0, values + g * GROUP_SIZE + 16 * k);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the rows read `staged`
}
#else
// In three passes with a barrier between: each word's maximum, kept in the values' place (n bytes: a
// float per word); each group's maximum of its words' and its scale; the values, from the input read
// again (a work-item's share of n is not known at build time, so it is not kept in registers). ggml's
// rule then rounds the scales, once every value is quantized with the unrounded one.
inline void stage_input(__local float* staged, __global const float* x, __global const float* weight, float ss, int n) {
    const int words = n / 4, groups = n / GROUP_SIZE, lid = get_local_id(0);
    __local float* maxima = (__local float*)STAGED_VALUES(staged, n);
    for (int i = lid; i < words; i += LOCAL) maxima[i] = word_max(input_word(x, weight, ss, i));
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = lid; g < groups; g += LOCAL) {
        float wmax = 0.0f;
        for (int i = g * (GROUP_SIZE / 4); i < (g + 1) * (GROUP_SIZE / 4); i++) wmax = larger(wmax, maxima[i]);
        staged[g] = wmax / 127.0f;
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the word maxima are read before the values overwrite them
    for (int i = lid; i < words; i += LOCAL)
        store_word(staged, input_word(x, weight, ss, i), q8_step(staged[i / (GROUP_SIZE / 4)]), n, i);
#ifdef Q8_GGML
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = lid; g < groups; g += LOCAL) staged[g] = q8_kept(staged[g]);
#endif
    barrier(CLK_LOCAL_MEM_FENCE);  // the rows read `staged`
}
#endif

// The dot product of four int8 pairs (words), added to acc, and of four unsigned bytes with four int8
// (dot_nibbles): one dp4a where NVIDIA's compiler takes PTX.
#ifdef INLINE_PTX
inline int dot_words(int a, int b, int acc) {
    int sum;
    __asm__("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(sum) : "r"(a), "r"(b), "r"(acc));
    return sum;
}
inline int dot_nibbles(int a, int b, int acc) {
    int sum;
    __asm__("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(sum) : "r"(a), "r"(b), "r"(acc));
    return sum;
}
#else
inline int dot_words(int a, int b, int acc) {
    const char4 u = as_char4(a), v = as_char4(b);
    return acc + u.x * v.x + u.y * v.y + u.z * v.z + u.w * v.w;
}
inline int dot_nibbles(int a, int b, int acc) {
    const uchar4 u = as_uchar4(a);
    const char4 v = as_char4(b);
    return acc + u.x * v.x + u.y * v.y + u.z * v.z + u.w * v.w;
}
#endif

// A word of Q8_WORD int8 values (weights.cl) as ints, loaded with Q8_VLOAD at any 4-byte alignment, and
// the dot product of two words added to acc.
#if Q8_WORD == 4
typedef int q8_word_t;
#define Q8_VLOAD(at, p) ((p)[at])
#define word_dot dot_words
#elif Q8_WORD == 8
typedef int2 q8_word_t;
#define Q8_VLOAD vload2
inline int word_dot(int2 a, int2 b, int acc) { return dot_words(a.y, b.y, dot_words(a.x, b.x, acc)); }
#else
typedef int4 q8_word_t;
#define Q8_VLOAD vload4
inline int word_dot(int4 a, int4 b, int acc) {
    return dot_words(a.w, b.w, dot_words(a.z, b.z, dot_words(a.y, b.y, dot_words(a.x, b.x, acc))));
}
#endif

#if SHAPE_FAMILY != SHAPE_GPU && GROUP_SIZE % 16 == 0
// 16 values from either memory at any alignment. PoCL compiles vload16 of chars into 2- and 4-byte loads
// and shuffles (as shape.cl's vloadv says of floats); clang's vector type with a char's alignment is one
// unaligned 16-byte load.
#ifdef __clang__
typedef char char16_unaligned __attribute__((ext_vector_type(16), aligned(1)));
#define GLOBAL_CHAR16(p) (*(__global const char16_unaligned*)(p))
#define LOCAL_CHAR16(p) (*(__local const char16_unaligned*)(p))
#else
#define GLOBAL_CHAR16(p) vload16(0, p)
#define LOCAL_CHAR16(p) vload16(0, p)
#endif
#endif

// The exact integer dot product of group g of a row (values at w) and of the staged input's values x, of
// `groups` groups each. Every partial sum is an int: |sum| <= GROUP_SIZE x 128 x 128.
#if SHAPE_FAMILY != SHAPE_GPU && GROUP_SIZE % 16 == 0
// CPU families: the group's consecutive weights (Q8_INTERLEAVE 1) for the SIMD units, 16 at a time, in 16
// partial sums (an integer sum: the exact shape's too).
#ifdef WEIGHT_Q4_0
// (Q4_0: the block's 16 bytes, low nibbles less 8 times the group's first 16 values, high ones the last
// 16, in 16-bit lanes: |q - 8| <= 8 and |x| <= 128, so a lane's two products sum to at most 2048.)
inline int16 group_partials(__global const weight_t* w, __local const char* x, int g) {
    const uchar16 b = as_uchar16(GLOBAL_CHAR16(w + 16 * g));
    __local const char* xg = x + g * GROUP_SIZE;
    const short16 lo = convert_short16(as_char16(b & (uchar16)(15)) - (char16)(8));
    const short16 hi = convert_short16(as_char16(b >> (uchar16)(4)) - (char16)(8));
    return convert_int16(lo * convert_short16(LOCAL_CHAR16(xg)) + hi * convert_short16(LOCAL_CHAR16(xg + 16)));
}
#else
inline int16 group_partials(__global const weight_t* w, __local const char* x, int g) {
    __global const weight_t* wg = w + g * GROUP_SIZE;
    __local const char* xg = x + g * GROUP_SIZE;
    int16 acc = (int16)(0);
#pragma unroll
    for (int i = 0; i < GROUP_SIZE; i += 16) acc += convert_int16(GLOBAL_CHAR16(wg + i)) * convert_int16(LOCAL_CHAR16(xg + i));
    return acc;
}
#endif
inline int group_dot(__global const weight_t* w, __local const char* x, int groups, int g) {
    const int16 acc = group_partials(w, x, g);
    const int8 a = acc.lo + acc.hi;
    const int4 b = a.lo + a.hi;
    const int2 c = b.lo + b.hi;
    return c.x + c.y;
}
// Groups g .. g + 3's dot products, their partial sums reduced together (a group reduced alone takes as
// many instructions as its products).
inline int4 group_dots4(__global const weight_t* w, __local const char* x, int g) {
    const int16 a = group_partials(w, x, g), b = group_partials(w, x, g + 1), c = group_partials(w, x, g + 2),
                d = group_partials(w, x, g + 3);
    const int8 a8 = a.lo + a.hi, b8 = b.lo + b.hi, c8 = c.lo + c.hi, d8 = d.lo + d.hi;
    const int8 ab = (int8)(a8.lo, b8.lo) + (int8)(a8.hi, b8.hi), cd = (int8)(c8.lo, d8.lo) + (int8)(c8.hi, d8.hi);
    const int8 pairs = (int8)(ab.even, cd.even) + (int8)(ab.odd, cd.odd);
    return pairs.even + pairs.odd;
}
#elif defined(Q4_TOKEN)
// Q4_0 in the token kernel: a lane takes its groups (every ROW_THREADS-th) Q4_BATCH at a time, their
// nibbles (a 16-byte load a block where the row allows) and scales loaded together, then their terms
// added in order; a group past the row's end loads the row's last and drops its term, so that every lane
// loads without a branch. row_pair's two rows go through one loop, each staged int read once for both.
#define Q4_BATCH 4
typedef struct {
    int4 nibbles[Q4_BATCH];
    float scale[Q4_BATCH];
} q4_batch_t;
inline void q4_load(__private q4_batch_t* b, __global const weight_t* w, int n, int g) {
    const int groups = n / GROUP_SIZE;
    const scales_t s = WEIGHT_SCALES(w, n);
#pragma unroll
    for (int i = 0; i < Q4_BATCH; i++) {
        const int at = min(g + i * ROW_THREADS, groups - 1);
        __global const weight_t* block = w + 16 * at;
        b->nibbles[i] = ((size_t)block & 15) == 0 ? *(__global const int4*)block : q4_words(w, at);
        b->scale[i] = SCALE(s, at);
    }
}
// Group g's staged values (ints, in the weights' order) into xv; returns 8 times their sum.
inline int q4_input(__local const int* xi, int groups, int g, __private int* xv) {
    int eights = 0;
#pragma unroll
    for (int k = 0; k < GROUP_SIZE / 4; k++) {
        xv[k] = xi[staged_int(groups, g, k)];
        eights = dot_words(0x08080808, xv[k], eights);
    }
    return eights;
}
// A block's integer dot product with its group's input: the unsigned nibbles' products (low nibbles the
// first 16 values, high ones the last 16) less 8 times the input's sum, the same integer as (q - 8)'s.
inline int q4_ival(int4 v, __private const int* xv, int eights) {
    const int4 lo = v & 0x0f0f0f0f, hi = (v >> 4) & 0x0f0f0f0f;
    int sum = dot_nibbles(lo.x, xv[0], 0);
    sum = dot_nibbles(lo.y, xv[1], sum);
    sum = dot_nibbles(lo.z, xv[2], sum);
    sum = dot_nibbles(lo.w, xv[3], sum);
    sum = dot_nibbles(hi.x, xv[4], sum);
    sum = dot_nibbles(hi.y, xv[5], sum);
    sum = dot_nibbles(hi.z, xv[6], sum);
    sum = dot_nibbles(hi.w, xv[7], sum);
    return sum - eights;
}
// A loaded batch's terms (its first group g) added in order to sum; two rows' batches to sum.x and sum.y.
inline float q4_batch_sum(__private const q4_batch_t* a, __local const float* staged, int n, int g, float sum) {
    const int groups = n / GROUP_SIZE;
    __local const int* xi = (__local const int*)STAGED_VALUES(staged, n);
#pragma unroll
    for (int i = 0; i < Q4_BATCH; i++) {
        const int at = g + i * ROW_THREADS;
        if (at < groups) {
            int xv[GROUP_SIZE / 4];
            const int eights = q4_input(xi, groups, at, xv);
            sum += Q8_TERM((float)q4_ival(a->nibbles[i], xv, eights), a->scale[i], staged[at]);
        }
    }
    return sum;
}
inline float2 q4_batch_sum2(__private const q4_batch_t* a, __private const q4_batch_t* b, __local const float* staged,
                            int n, int g, float2 sum) {
    const int groups = n / GROUP_SIZE;
    __local const int* xi = (__local const int*)STAGED_VALUES(staged, n);
#pragma unroll
    for (int i = 0; i < Q4_BATCH; i++) {
        const int at = g + i * ROW_THREADS;
        if (at < groups) {
            int xv[GROUP_SIZE / 4];
            const int eights = q4_input(xi, groups, at, xv);
            const float x_scale = staged[at];
            sum.x += Q8_TERM((float)q4_ival(a->nibbles[i], xv, eights), a->scale[i], x_scale);
            sum.y += Q8_TERM((float)q4_ival(b->nibbles[i], xv, eights), b->scale[i], x_scale);
        }
    }
    return sum;
}
// This lane's part of a row's product (of two rows') from group g on, added to sum.
inline float q4_dot(__global const weight_t* w, __local const float* staged, int n, int g, float sum) {
    for (; g < n / GROUP_SIZE; g += Q4_BATCH * ROW_THREADS) {
        q4_batch_t a;
        q4_load(&a, w, n, g);
        sum = q4_batch_sum(&a, staged, n, g, sum);
    }
    return sum;
}
inline float2 q4_dot2(__global const weight_t* wa, __global const weight_t* wb, __local const float* staged, int n,
                      int g, float2 sum) {
    for (; g < n / GROUP_SIZE; g += Q4_BATCH * ROW_THREADS) {
        q4_batch_t a, b;
        q4_load(&a, wa, n, g);
        q4_load(&b, wb, n, g);
        sum = q4_batch_sum2(&a, &b, staged, n, g, sum);
    }
    return sum;
}
#else
// Group g's words (the GPU family's up to 16 bytes, the CPU families' 4): one load where the row's start
// allows it (rows of a multiple of Q8_WORD bytes), else Q8_WORD / 4 loads of ints. Q4_0's block: its
// nibbles in one load, as two words of bytes q (0 .. 15): its low nibbles, then its high ones.
#ifdef WEIGHT_Q4_0
inline void load_group(__private q8_word_t* words, __global const weight_t* w, int groups, int g) {
    const int4 v = q4_words(w, g);
    words[0] = v & 0x0f0f0f0f;
    words[1] = (v >> 4) & 0x0f0f0f0f;
}
#else
inline void load_group(__private q8_word_t* words, __global const weight_t* w, int groups, int g) {
    __global const int* wi = (__global const int*)w;
    const bool aligned = ((size_t)w & (Q8_WORD - 1)) == 0;
#pragma unroll
    for (int k = 0; k < GROUP_SIZE / Q8_WORD; k++) {
        const int at = q8_word(groups, g, k);
        words[k] = aligned ? ((__global const q8_word_t*)w)[at] : Q8_VLOAD(at, wi);
    }
}
#endif
// The group's words' dot product with the staged input's, read as ints: local memory is aligned only to
// a float (a vector load faults on NVIDIA). Q4_0's: the unsigned nibbles' products less 8 times the
// input's sum, the same integer as (q - 8)'s products.
#ifdef WEIGHT_Q4_0
inline int loaded_group_dot(__private const q8_word_t* words, __local const char* x, int groups, int g) {
    __local const int* xi = (__local const int*)x;
    int sum = 0, eights = 0;
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const int4 xv = Q8_VLOAD(q8_word(groups, g, k), xi);
        sum = dot_nibbles(words[k].w, xv.w,
                          dot_nibbles(words[k].z, xv.z, dot_nibbles(words[k].y, xv.y, dot_nibbles(words[k].x, xv.x, sum))));
        eights = word_dot((int4)(0x08080808), xv, eights);
    }
    return sum - eights;
}
#else
inline int loaded_group_dot(__private const q8_word_t* words, __local const char* x, int groups, int g) {
    __local const int* xi = (__local const int*)x;
    int sum = 0;
#pragma unroll
    for (int k = 0; k < GROUP_SIZE / Q8_WORD; k++) sum = word_dot(words[k], Q8_VLOAD(q8_word(groups, g, k), xi), sum);
    return sum;
}
#endif
inline int group_dot(__global const weight_t* w, __local const char* x, int groups, int g) {
    q8_word_t words[GROUP_SIZE / Q8_WORD];
    load_group(words, w, groups, g);
    return loaded_group_dot(words, x, groups, g);
}
#endif

#ifndef Q4_TOKEN
// Group g's term of a row (its scales at w_scales) with the staged input (Q8_TERM).
inline float q8_term(__global const weight_t* w, scales_t w_scales, __local const float* staged, int groups, int g) {
    return Q8_TERM((float)group_dot(w, STAGED_VALUES(staged, groups * GROUP_SIZE), groups, g), SCALE(w_scales, g),
                   staged[g]);
}
#if SHAPE_FAMILY != SHAPE_GPU && GROUP_SIZE % 16 == 0
// Groups g .. g + 3's terms, formed together, lane by lane as q8_term forms one.
inline float4 q8_terms4(__global const weight_t* w, scales_t w_scales, __local const float* staged, int groups,
                        int g) {
    return Q8_TERM(convert_float4(group_dots4(w, STAGED_VALUES(staged, groups * GROUP_SIZE), g)),
                   SCALE4(w_scales, g), vload4(0, staged + g));
}
#endif

#if defined(WEIGHT_Q4_0) && SHAPE_FAMILY == SHAPE_GPU
// A Q4_0 group is half a Q8_0 group's bytes: the GPU family's lanes load Q4_IN_FLIGHT of their groups (g
// and every ROW_THREADS-th after it) before any is used, to keep more bytes in flight; their terms in order.
inline void q4_terms_in_flight(__private float* terms, __global const weight_t* w, scales_t w_scales,
                               __local const float* staged, int groups, int g) {
    q8_word_t words[Q4_IN_FLIGHT][2];
    float scales[Q4_IN_FLIGHT];
#pragma unroll
    for (int i = 0; i < Q4_IN_FLIGHT; i++) {
        load_group(words[i], w, groups, g + i * ROW_THREADS);
        scales[i] = SCALE(w_scales, g + i * ROW_THREADS);
    }
#pragma unroll
    for (int i = 0; i < Q4_IN_FLIGHT; i++)
        terms[i] = Q8_TERM((float)loaded_group_dot(words[i], STAGED_VALUES(staged, groups * GROUP_SIZE), groups,
                                                   g + i * ROW_THREADS),
                           scales[i], staged[g + i * ROW_THREADS]);
}
#endif

// This lane's part of a row's product with the staged input: the terms of every ROW_THREADS-th group
// from g (its lane, or the group after the lane's first: row_dot), added in order to sum.
inline float q8_dot(__global const weight_t* w, __local const float* staged, int n, int g, float sum) {
    const int groups = n / GROUP_SIZE;
    const scales_t w_scales = WEIGHT_SCALES(w, n);
#if SHAPE_FAMILY != SHAPE_GPU && GROUP_SIZE % 16 == 0
    // CPU families (one lane a row): four groups' terms formed together, then added one at a time in order.
    for (; g + 4 <= groups; g += 4) {
        const float4 terms = q8_terms4(w, w_scales, staged, groups, g);
        sum += terms.x;
        sum += terms.y;
        sum += terms.z;
        sum += terms.w;
    }
#endif
#if defined(WEIGHT_Q4_0) && SHAPE_FAMILY == SHAPE_GPU
    for (; g + (Q4_IN_FLIGHT - 1) * ROW_THREADS < groups; g += Q4_IN_FLIGHT * ROW_THREADS) {
        float terms[Q4_IN_FLIGHT];
        q4_terms_in_flight(terms, w, w_scales, staged, groups, g);
#pragma unroll
        for (int i = 0; i < Q4_IN_FLIGHT; i++) sum += terms[i];
    }
#endif
    for (; g < groups; g += ROW_THREADS) sum += q8_term(w, w_scales, staged, groups, g);
    return sum;
}

#if SHAPE_FAMILY != SHAPE_GPU && GROUP_SIZE % 16 == 0
// CPU families: two rows' products at once, each sum formed as q8_dot forms it. A row's terms are one
// chain of dependent adds; two rows' chains interleaved overlap each other's latency.
inline float2 q8_dot2(__global const weight_t* wa, __global const weight_t* wb, __local const float* staged, int n) {
    const int groups = n / GROUP_SIZE;
    const scales_t sa = WEIGHT_SCALES(wa, n), sb = WEIGHT_SCALES(wb, n);
    float a = 0.0f, b = 0.0f;
    int g = 0;
    for (; g + 4 <= groups; g += 4) {
        const float4 ta = q8_terms4(wa, sa, staged, groups, g), tb = q8_terms4(wb, sb, staged, groups, g);
        a += ta.x;
        b += tb.x;
        a += ta.y;
        b += tb.y;
        a += ta.z;
        b += tb.z;
        a += ta.w;
        b += tb.w;
    }
    for (; g < groups; g++) {
        a += q8_term(wa, sa, staged, groups, g);
        b += q8_term(wb, sb, staged, groups, g);
    }
    return (float2)(a, b);
}
#endif

#ifdef ORDERED_SUMS
// Ordered sums (shape.cl): a row's lanes keep each group's term in local memory past the staged input,
// and one work-item of the row adds them in group order, as runq.c's loop does. Row `which` (0, or 1 for
// row_pair's second) of this work-item's slot: an odd number of floats a row, so that the rows' adding
// work-items read distinct banks (the host sizes them: staged_bytes).
inline __local float* row_terms(__local float* staged, int n, int which) {
    __local float* terms = (__local float*)(STAGED_VALUES(staged, n) + n);
    return terms + (which * ROWS_PER_GROUP + (int)get_local_id(0) / ROW_THREADS) * ((n / GROUP_SIZE) | 1);
}
// This lane's groups' terms of a row (every ROW_THREADS-th group from its lane), kept in `terms`.
inline void keep_terms(__global const weight_t* w, __local const float* staged, int n, int lane, __local float* terms) {
    const int groups = n / GROUP_SIZE;
    const scales_t w_scales = WEIGHT_SCALES(w, n);
    int g = lane;
#ifdef WEIGHT_Q4_0
    for (; g + (Q4_IN_FLIGHT - 1) * ROW_THREADS < groups; g += Q4_IN_FLIGHT * ROW_THREADS) {
        float batch[Q4_IN_FLIGHT];
        q4_terms_in_flight(batch, w, w_scales, staged, groups, g);
#pragma unroll
        for (int i = 0; i < Q4_IN_FLIGHT; i++) terms[g + i * ROW_THREADS] = batch[i];
    }
#endif
    for (; g < groups; g += ROW_THREADS) terms[g] = q8_term(w, w_scales, staged, groups, g);
}
// The sums of `count` rows' kept terms (1, or 2: row_pair's), row k's added by the row's lane k, shared
// with every lane of the row through scratch (two floats a row).
inline float2 ordered_sums(__local float* staged, int n, int count, __local float* scratch) {
    barrier(CLK_LOCAL_MEM_FENCE);  // every lane's terms are kept
    const int lane = get_local_id(0) % ROW_THREADS, slot = get_local_id(0) / ROW_THREADS;
    if (lane < count) {
        __local const float* terms = row_terms(staged, n, lane);
        float sum = 0.0f;
        for (int g = 0; g < n / GROUP_SIZE; g++) sum += terms[g];
        scratch[2 * slot + lane] = sum;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const float2 sums = (float2)(scratch[2 * slot], count > 1 ? scratch[2 * slot + 1] : 0.0f);
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch and the terms are reused by the next call
    return sums;
}
#endif

#ifdef FEW_GROUPS
// The token kernel's first unit of a step loads each row's first group of the lane (g = lane) before it
// stages the input, so that the two waits on memory overlap rather than follow each other.
typedef struct {
    q8_word_t words[GROUP_SIZE / Q8_WORD];
    float scale;
} q8_group_t;
inline void load_first_group(__private q8_group_t* first, __global const weight_t* w, int n, int lane) {
    // Lanes past a short row's groups load its last group, and drop its term: every lane loads, as loads
    // under a branch made NVIDIA's build of small models slower.
    const int g = min(lane, n / GROUP_SIZE - 1);
    load_group(first->words, w, n / GROUP_SIZE, g);
    first->scale = SCALE(WEIGHT_SCALES(w, n), g);
}
// The lane's part of the row's product: the first group's term (q8_term's), then q8_dot's from the next.
inline float first_group_dot(__private const q8_group_t* first, __global const weight_t* w, __local const float* staged,
                             int n, int lane) {
    const int groups = n / GROUP_SIZE, g = min(lane, groups - 1);
    const float term =
        Q8_TERM((float)loaded_group_dot(first->words, STAGED_VALUES(staged, n), groups, g), first->scale, staged[g]);
    return q8_dot(w, staged, n, lane + ROW_THREADS, lane < groups ? term : 0.0f);
}
#endif
#endif

// One row's product with the staged input (the token kernel: staged_n < 0 stages it first; every other
// caller staged it, staged_n > 0: KernelSet::staged_count), this lane's part (ORDERED_SUMS: the whole,
// which row_sum leaves as it is).
inline float row_dot(__global const weight_t* w, __global const float* x, __global const float* weight, float ss,
                     __local float* staged, int staged_n, int n, int lane, __local float* scratch) {
#ifdef ORDERED_SUMS
    keep_terms(w, staged, n, lane, row_terms(staged, n, 0));
    return ordered_sums(staged, n, 1, scratch).x;
#elif defined(Q4_TOKEN)
    if (staged_n < 0) {
        q4_batch_t first;
        q4_load(&first, w, n, lane);
        stage_step_input(staged, x, weight, n, scratch);
        return q4_dot(w, staged, n, lane + Q4_BATCH * ROW_THREADS, q4_batch_sum(&first, staged, n, lane, 0.0f));
    }
    return q4_dot(w, staged, n, lane, 0.0f);
#else
#ifdef FEW_GROUPS
    if (staged_n < 0) {
        q8_group_t first;
        load_first_group(&first, w, n, lane);
        stage_step_input(staged, x, weight, n, scratch);
        return first_group_dot(&first, w, staged, n, lane);
    }
#endif
    return q8_dot(w, staged, n, lane, 0.0f);
#endif
}

// Two rows' products with the same input (x: wa's, y: wb's), summed over their lanes (row_sum; with
// FEW_GROUPS in one tree, and scratch holds 2 * LOCAL floats; ordered sums: ordered_sums).
inline float2 row_pair(__global const weight_t* wa, __global const weight_t* wb, __global const float* x,
                       __global const float* weight, float ss, __local float* staged, int staged_n, int n,
                       int lane, __local float* scratch) {
#ifdef ORDERED_SUMS
    keep_terms(wa, staged, n, lane, row_terms(staged, n, 0));
    keep_terms(wb, staged, n, lane, row_terms(staged, n, 1));
    return ordered_sums(staged, n, 2, scratch);
#elif defined(Q4_TOKEN)
    if (staged_n < 0) {
        q4_batch_t first_a, first_b;
        q4_load(&first_a, wa, n, lane);
        q4_load(&first_b, wb, n, lane);
        stage_step_input(staged, x, weight, n, scratch);
        const float2 first = q4_batch_sum2(&first_a, &first_b, staged, n, lane, (float2)(0.0f));
        return row_sum2(q4_dot2(wa, wb, staged, n, lane + Q4_BATCH * ROW_THREADS, first), scratch);
    }
    return row_sum2(q4_dot2(wa, wb, staged, n, lane, (float2)(0.0f)), scratch);
#elif defined(FEW_GROUPS)
    if (staged_n < 0) {
        q8_group_t first_a, first_b;
        load_first_group(&first_a, wa, n, lane);
        load_first_group(&first_b, wb, n, lane);
        stage_step_input(staged, x, weight, n, scratch);
        return row_sum2((float2)(first_group_dot(&first_a, wa, staged, n, lane),
                                 first_group_dot(&first_b, wb, staged, n, lane)), scratch);
    }
    return row_sum2((float2)(q8_dot(wa, staged, n, lane, 0.0f), q8_dot(wb, staged, n, lane, 0.0f)), scratch);
#elif SHAPE_FAMILY != SHAPE_GPU && GROUP_SIZE % 16 == 0
    return q8_dot2(wa, wb, staged, n);  // (a row a work-item: no lanes to sum)
#else
    const float a = row_sum(q8_dot(wa, staged, n, lane, 0.0f), scratch);
    const float b = row_sum(q8_dot(wb, staged, n, lane, 0.0f), scratch);
    return (float2)(a, b);
#endif
}
#endif
