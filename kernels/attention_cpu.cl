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
    const float8 max8 = fmax(max_w.lo, max_w.hi);
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
    // Each element's terms in two chains, the even positions' and the odd ones', added at the end, so that
    // one add's latency does not pace the positions; 8 elements take two positions a float16.
    for (; i + 16 <= head_size; i += 16) {
        floatw even = 0.0f, odd = 0.0f;
        int t = 0;
        for (; t + 1 <= pos; t += 2) {
            even += a[t] * vloadw(v + (size_t)t * kv_dim + i);
            odd += a[t + 1] * vloadw(v + (size_t)(t + 1) * kv_dim + i);
        }
        if (t <= pos) even += a[t] * vloadw(v + (size_t)t * kv_dim + i);
        vstorew(even + odd, o + i);
    }
    for (; i + 8 <= head_size; i += 8) {
        float16 even = 0.0f, odd = 0.0f;
        int t = 0;
        for (; t + 3 <= pos; t += 4) {
            __global const float* vt = v + (size_t)t * kv_dim + i;
            even += (float16)((float8)a[t], (float8)a[t + 1]) * (float16)(vload8(0, vt), vload8(0, vt + kv_dim));
            odd += (float16)((float8)a[t + 2], (float8)a[t + 3]) *
                   (float16)(vload8(0, vt + 2 * kv_dim), vload8(0, vt + 3 * kv_dim));
        }
        const float16 pairs = even + odd;
        float8 acc = pairs.lo + pairs.hi;
        for (; t <= pos; t++) acc += a[t] * vload8(0, v + (size_t)t * kv_dim + i);
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
