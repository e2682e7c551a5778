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

#if SHAPE_FAMILY == SHAPE_EXACT
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

UNIT_FUNCTION void attention_head(int h, __global const float* q, __global const float* key_cache,
                                  __global const float* value_cache, __global float* att, __global float* out,
                                  int n_heads, int head_size, int kv_dim, int kv_mul, int seq_len, int pos) {
    const float scale = sqrt((float)head_size);
    // CPU shapes: one work-item per head running run.c's loops. Every output element sums its terms in
    // run.c's order (the "exact" shape is bit-identical to it); the scores' dot products are the rows'
    // (key_dot), float16 steps on the "cpu" shape and 16 positions at a time on the exact one, and their
    // weighted sum takes 16 elements of the output at a time over the positions, in registers rather than
    // through global memory.
    if (h >= n_heads) return;
    __global const float* qh = q + h * head_size;
    __global float* a = att + (size_t)h * seq_len;
    const size_t kv_off = (size_t)(h / kv_mul) * head_size;
    int t = 0;
#if SHAPE_FAMILY == SHAPE_EXACT
    for (; t + 16 <= pos + 1; t += 16)
        vstorew(key_dots16(key_cache + (size_t)t * kv_dim + kv_off, qh, head_size, kv_dim) / scale, a + t);
#endif
    for (; t <= pos; t++) a[t] = key_dot(key_cache + (size_t)t * kv_dim + kv_off, qh, head_size) / scale;
    float max_val = a[0];
    for (int t = 1; t <= pos; t++) max_val = a[t] > max_val ? a[t] : max_val;
    float sum = 0.0f;
    for (int t = 0; t <= pos; t++) {
        a[t] = model_exp(a[t] - max_val);
        sum += a[t];
    }
    for (int t = 0; t <= pos; t++) a[t] /= sum;
    __global float* o = out + h * head_size;
    __global const float* v = value_cache + kv_off;
    int i = 0;
#if SHAPE_FAMILY != SHAPE_GPU
    for (; i + 16 <= head_size; i += 16) {
        floatw acc = 0.0f;
        for (int t = 0; t <= pos; t++) acc += a[t] * vloadw(v + (size_t)t * kv_dim + i);
        vstorew(acc, o + i);
    }
#endif
    for (; i < head_size; i++) {
        float acc = 0.0f;
        for (int t = 0; t <= pos; t++) acc += a[t] * v[(size_t)t * kv_dim + i];
        o[i] = acc;
    }
}
