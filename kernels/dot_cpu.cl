// The CPU families' (SHAPE_EXACT, SHAPE_CPU) RMSNorm scale and dot products: a work-item owns its row,
// so it computes them alone, without barriers; the exact family in run.c's loops, bit-identical to it.
#if SHAPE_FAMILY != SHAPE_GPU
#if VECTOR_WIDTH == 16
inline float hsum(float16 v) {
    const float8 a = v.lo + upper_half(v);
    const float4 b = a.lo + a.hi;
    const float2 c = b.lo + b.hi;
    return add_lanes(c.x, c.y);
}
#endif

// RMSNorm's scale 1/sqrt(mean(x^2) + eps), as run.c computes it.
inline float rms_scale(__global const float* x, int n, __local float* scratch) {
    float ss = 0.0f;
#if SHAPE_FAMILY == SHAPE_EXACT
    for (int j = 0; j < n; j++) ss += x[j] * x[j];
#else
    floatv acc = (floatv)(0.0f);
    int j = 0;
    for (; j + VECTOR_WIDTH <= n; j += VECTOR_WIDTH) {
        const floatv v = vloadv(x + j);
        acc = mad(v, v, acc);
    }
    ss = hsum(acc);
    for (; j < n; j++) ss = mad(x[j], x[j], ss);
#endif
    return rms_from_sum(ss, n);
}

// The body of dot(a, in) over n elements, a's read by LOAD(a, j) (element j as a float) and LOADV(a, j)
// (floatv elements from j): a weight row, or a key's floats. The exact family's is run.c's matmul loop.
#if SHAPE_FAMILY == SHAPE_EXACT
#define DOT_BODY(LOAD, LOADV, a, in, n)                     \
    float sum = 0.0f;                                       \
    for (int j = 0; j < (n); j++) sum += LOAD(a, j) * (in)[j]; \
    return sum;
#else
#define DOT_BODY(LOAD, LOADV, a, in, n)                                                     \
    floatv acc = (floatv)(0.0f);                                                            \
    int j = 0;                                                                              \
    for (; j + VECTOR_WIDTH <= (n); j += VECTOR_WIDTH) acc = mad(LOADV(a, j), vloadv((in) + j), acc); \
    float sum = hsum(acc);                                                                  \
    for (; j < (n); j++) sum = mad(LOAD(a, j), (in)[j], sum);                               \
    return sum;
#endif

#ifdef FLOAT_WEIGHTS  // (Q8_0 rows: dot_quantized.cl)
// dot(w, in) over n elements of a weight row (a row has one lane).
inline float partial_dot(__global const weight_t* w, __global const float* in, int n, int lane) {
    DOT_BODY(WEIGHT, WEIGHTV, w, in, n)
}
#endif

// The same dot product of n floats (attention's keys, whatever the weights' format).
#define FLOAT_AT(a, j) ((a)[j])
#define FLOATV_AT(a, j) vloadv((a) + (j))
inline float partial_dot_floats(__global const float* a, __global const float* in, int n) {
    DOT_BODY(FLOAT_AT, FLOATV_AT, a, in, n)
}

#ifdef FLOAT_WEIGHTS
// As partial_dot, with the input normalized on the fly: in[j] = weight[j] * (ss * x[j]), the exact
// expression run.c's rmsnorm stores, so fusing the norm changes no bit.
inline float partial_dot_normed(__global const weight_t* w, __global const float* x, __global const float* weight,
                                float ss, int n, int lane) {
    float sum = 0.0f;
#if SHAPE_FAMILY == SHAPE_EXACT
    for (int j = 0; j < n; j++) sum += WEIGHT(w, j) * (weight[j] * (ss * x[j]));
#else
    floatv acc = (floatv)(0.0f);
    int j = 0;
    for (; j + VECTOR_WIDTH <= n; j += VECTOR_WIDTH)
        acc = mad(WEIGHTV(w, j), vloadv(weight + j) * (ss * vloadv(x + j)), acc);
    sum = hsum(acc);
    for (; j < n; j++) sum = mad(WEIGHT(w, j), weight[j] * (ss * x[j]), sum);
#endif
    return sum;
}

#if SHAPE_FAMILY == SHAPE_EXACT
// Two rows' dot products with one input (in[j], or with weight given weight[j] * (ss * x[j])), each in
// run.c's order. Their chains of dependent adds interleave, so that a core overlaps them where one row's
// chain alone waits on every add; sixteen weights of each row load (and widen from halves) at a time.
inline float2 partial_dot2(__global const weight_t* wa, __global const weight_t* wb, __global const float* x,
                           __global const float* weight, float ss, int n) {
    float a = 0.0f, b = 0.0f;
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        const float16 in = weight ? vloadw(weight + j) * (ss * vloadw(x + j)) : vloadw(x + j);
        float pa[16], pb[16];
        vstore16(WEIGHTW(wa, j) * in, 0, pa);
        vstore16(WEIGHTW(wb, j) * in, 0, pb);
        for (int k = 0; k < 16; k++) {
            a += pa[k];
            b += pb[k];
        }
    }
    for (; j < n; j++) {
        const float in = weight ? weight[j] * (ss * x[j]) : x[j];
        a += WEIGHT(wa, j) * in;
        b += WEIGHT(wb, j) * in;
    }
    return (float2)(a, b);
}

// The 16 x 16 products m (m[i]: row i's sixteen) transposed in place, so that m[k] holds every row's
// product k: four rounds that each take the even lanes of two rows, then their odd lanes. Oclgrind's
// uninitialized-value check (shape.cl) takes any shuffle's lane 11 for an undefined one, so the shuffles
// take only even lanes; odd lanes become even ones by rotating each 64-bit lane, which is not a shuffle.
// Clang's __builtin_shufflevector makes each a permute on a CPU; other compilers move the lanes one by one.
#if defined(__has_builtin)
#if __has_builtin(__builtin_shufflevector)
#define EVEN_LANES
// (a0, a2, ..., a14, b0, b2, ..., b14), and a's lanes pairwise swapped: (a1, a0, a3, a2, ...).
inline float16 even_lanes(float16 a, float16 b) {
    return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
}
inline float16 swap_pairs(float16 a) { return as_float16(rotate(as_ulong8(a), (ulong8)(32))); }
#endif
#endif
inline void transpose16(__private float16* m) {
#ifdef EVEN_LANES
#pragma unroll
    for (int round = 0; round < 4; round++) {
        float16 t[16];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            t[i] = even_lanes(m[2 * i], m[2 * i + 1]);
            t[i + 8] = even_lanes(swap_pairs(m[2 * i]), swap_pairs(m[2 * i + 1]));
        }
#pragma unroll
        for (int i = 0; i < 16; i++) m[i] = t[i];
    }
#else
    float t[16][16];
    for (int i = 0; i < 16; i++)
        for (int k = 0; k < 16; k++) t[k][i] = ((__private float*)&m[i])[k];
    for (int k = 0; k < 16; k++) m[k] = vload16(0, t[k]);
#endif
}

// sum plus the 16 x 16 products m column by column: lane i adds m[i]'s sixteen in order.
inline float16 add_columns(float16 sum, __private float16* m) {
    transpose16(m);
#pragma unroll
    for (int k = 0; k < 16; k++) sum += m[k];
    return sum;
}

// Sixteen rows' dot products with one input (as partial_dot2), rows 0 .. 7 of wa in lanes 0 .. 7 and of
// wb in lanes 8 .. 15 (WEIGHT_ROW). Each row's sum is a lane of one vector: its adds, in run.c's order,
// are sixteen chains at once, where a pair of rows waits on every add.
inline float16 partial_dot16(__global const weight_t* wa, __global const weight_t* wb, __global const float* x,
                             __global const float* weight, float ss, int n) {
    float16 sum = (float16)(0.0f);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        const float16 in = weight ? vloadw(weight + j) * (ss * vloadw(x + j)) : vloadw(x + j);
        float16 m[16];
#pragma unroll
        for (int i = 0; i < 16; i++) m[i] = WEIGHTW(WEIGHT_ROW(i < 8 ? wa : wb, i % 8, n), j) * in;
        sum = add_columns(sum, m);
    }
    for (; j < n; j++) {
        const float in = weight ? weight[j] * (ss * x[j]) : x[j];
        float column[16];
        for (int i = 0; i < 16; i++) column[i] = WEIGHT(WEIGHT_ROW(i < 8 ? wa : wb, i % 8, n), j);
        sum += vload16(0, column) * in;
    }
    return sum;
}
#endif
#endif
#endif
