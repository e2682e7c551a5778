// The CPU families' attention (attention.cl's kernel on SHAPE_EXACT and SHAPE_CPU, and prefill's
// attention_rows on every family): one work-item per head `h`, the whole of positions 0..pos in one chunk,
// the scores in `att`.
#if SHAPE_FAMILY == SHAPE_GPU
// A score's dot product by one work-item alone, in run.c's order (the GPU family's partial_dot is a lane's
// share of a row).
inline float key_dot(__global const float* k, __global const float* q, int n) {
    float sum = 0.0f;
    for (int j = 0; j < n; j++) sum += k[j] * q[j];
    return sum;
}
#else
#define key_dot(k, q, n) partial_dot_floats(k, q, n)  // the keys are floats whatever the weights are
#endif

#if SHAPE_FAMILY != SHAPE_GPU
// The scores of the 16 positions whose keys start at k, kv_dim floats apart: a lane each, every one
// summed in run.c's order (key_dot's), over the n elements of the head's query q.
inline floatw key_dots16(__global const float* k, __global const float* q, int n, int kv_dim) {
    floatw sum = 0.0f;
    for (int j = 0; j < n; j++) {
        __global const float* kj = k + j;
        const floatw keys = (floatw)(kj[0], kj[kv_dim], kj[2 * kv_dim], kj[3 * kv_dim], kj[4 * kv_dim], kj[5 * kv_dim],
                                     kj[6 * kv_dim], kj[7 * kv_dim], kj[8 * kv_dim], kj[9 * kv_dim], kj[10 * kv_dim],
                                     kj[11 * kv_dim], kj[12 * kv_dim], kj[13 * kv_dim], kj[14 * kv_dim], kj[15 * kv_dim]);
        sum += keys * q[j];
    }
    return sum;
}
#endif

#if SHAPE_FAMILY == SHAPE_CPU
// Softmax of a[0..n) on the "cpu" shape, 16 scores at a time: the maximum and the quotients are exact in any
// order; the sum adds lane by lane and then across the lanes, so it differs from run.c's in the last bits.
inline void softmax_scores(__global float* a, int n) {
    int t = 0;
    floatw max_w = (floatw)(-INFINITY);
    for (; t + 16 <= n; t += 16) max_w = fmax(max_w, vloadw(a + t));
    const float8 max8 = fmax(max_w.lo, upper_half(max_w));
    const float4 max4 = fmax(max8.lo, max8.hi);
    float max_val = fmax(fmax(max4.x, max4.y), fmax(max4.z, max4.w));
    for (; t < n; t++) max_val = a[t] > max_val ? a[t] : max_val;
    floatw sum_w = 0.0f;
    for (t = 0; t + 16 <= n; t += 16) {
        const floatw e = exp(vloadw(a + t) - max_val);
        vstorew(e, a + t);
        sum_w += e;
    }
    float sum = hsum(sum_w);
    for (; t < n; t++) {
        a[t] = model_exp(a[t] - max_val);
        sum += a[t];
    }
    for (t = 0; t + 16 <= n; t += 16) vstorew(vloadw(a + t) / sum, a + t);
    for (; t < n; t++) a[t] /= sum;
}
#else
// run.c's softmax of a[0..n).
inline void softmax_scores(__global float* a, int n) {
    float max_val = a[0];
    for (int t = 1; t < n; t++) max_val = a[t] > max_val ? a[t] : max_val;
    float sum = 0.0f;
    for (int t = 0; t < n; t++) {
        a[t] = model_exp(a[t] - max_val);
        sum += a[t];
    }
    for (int t = 0; t < n; t++) a[t] /= sum;
}
#endif

UNIT_FUNCTION void attention_head(int h, __global const float* q, __global const float* key_cache,
                                  __global const float* value_cache, __global float* att, __global float* out,
                                  int n_heads, int head_size, int kv_dim, int kv_mul, int seq_len, int pos) {
    const float scale = sqrt((float)head_size);
    // CPU shapes: one work-item per head running run.c's loops. The scores' dot products are the rows'
    // (key_dot: float16 steps on the "cpu" shape), or 16 positions at a time in run.c's order on the exact
    // shape and for heads shorter than 16 on the "cpu" one; the weighted sum takes 16 (then 8) elements of
    // the output at a time over the positions, in registers rather than through global memory, each in
    // run.c's order on the exact shape. Only the exact shape is bit-identical to run.c.
    if (h >= n_heads) return;
    __global const float* qh = q + h * head_size;
    __global float* a = att + (size_t)h * seq_len;
    const size_t kv_off = (size_t)(h / kv_mul) * head_size;
    int t = 0;
#if SHAPE_FAMILY != SHAPE_GPU
    const bool by_positions = SHAPE_FAMILY == SHAPE_EXACT || head_size < 16;
    for (; by_positions && t + 16 <= pos + 1; t += 16)
        vstorew(key_dots16(key_cache + (size_t)t * kv_dim + kv_off, qh, head_size, kv_dim) / scale, a + t);
#endif
    for (; t <= pos; t++) a[t] = key_dot(key_cache + (size_t)t * kv_dim + kv_off, qh, head_size) / scale;
    softmax_scores(a, pos + 1);
    __global float* o = out + h * head_size;
    __global const float* v = value_cache + kv_off;
    int i = 0;
#if SHAPE_FAMILY == SHAPE_CPU
    // Each element's terms in two chains, alternate steps' (a step: one position, or two for 8 elements
    // in a float16), added at the end, so that one add's latency does not pace the positions.
    for (; i + 16 <= head_size; i += 16) {
        floatw acc0 = 0.0f, acc1 = 0.0f;
        int p = 0;
        for (; p + 1 <= pos; p += 2) {
            acc0 += a[p] * vloadw(v + (size_t)p * kv_dim + i);
            acc1 += a[p + 1] * vloadw(v + (size_t)(p + 1) * kv_dim + i);
        }
        if (p <= pos) acc0 += a[p] * vloadw(v + (size_t)p * kv_dim + i);
        vstorew(acc0 + acc1, o + i);
    }
    for (; i + 8 <= head_size; i += 8) {
        float16 acc0 = 0.0f, acc1 = 0.0f;  // positions p, p + 1 (lanes 0..7, 8..15); then p + 2, p + 3
        int p = 0;
        for (; p + 3 <= pos; p += 4) {
            __global const float* vp = v + (size_t)p * kv_dim + i;
            acc0 += join_halves((float8)a[p], (float8)a[p + 1]) * join_halves(vload8(0, vp), vload8(0, vp + kv_dim));
            acc1 += join_halves((float8)a[p + 2], (float8)a[p + 3]) *
                    join_halves(vload8(0, vp + 2 * kv_dim), vload8(0, vp + 3 * kv_dim));
        }
        const float16 sums = acc0 + acc1;
        float8 acc = sums.lo + upper_half(sums);
        for (; p <= pos; p++) acc += a[p] * vload8(0, v + (size_t)p * kv_dim + i);
        vstore8(acc, 0, o + i);
    }
#elif SHAPE_FAMILY == SHAPE_EXACT
    for (; i + 16 <= head_size; i += 16) {
        floatw acc = 0.0f;
        for (int t = 0; t <= pos; t++) acc += a[t] * vloadw(v + (size_t)t * kv_dim + i);
        vstorew(acc, o + i);
    }
    for (; i + 8 <= head_size; i += 8) {
        float8 acc = 0.0f;
        for (int t = 0; t <= pos; t++) acc += a[t] * vload8(0, v + (size_t)t * kv_dim + i);
        vstore8(acc, 0, o + i);
    }
#endif
    for (; i < head_size; i++) {
        float acc = 0.0f;
        for (int t = 0; t <= pos; t++) acc += a[t] * v[(size_t)t * kv_dim + i];
        o[i] = acc;
    }
}
