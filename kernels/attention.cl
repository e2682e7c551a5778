// Grouped-query attention of one position over the cached positions 0..pos of one layer. Query head h
// reads KV head h / kv_mul. `att` is scratch of n_heads x seq_len scores.
__kernel void attention(__global const float* q, __global const float* key_cache, __global const float* value_cache,
                        __global float* att, __global float* out, int n_heads, int head_size, int kv_dim, int kv_mul,
                        int seq_len, int pos) {
    const float scale = sqrt((float)head_size);
#if ROW_THREADS == 1
    // CPU shape: one work-item per head running run.c's loops in run.c's order.
    const int h = get_global_id(0);
    if (h >= n_heads) return;
    __global const float* qh = q + h * head_size;
    __global float* a = att + (size_t)h * seq_len;
    const size_t kv_off = (size_t)(h / kv_mul) * head_size;
    for (int t = 0; t <= pos; t++) {
        __global const float* k = key_cache + (size_t)t * kv_dim + kv_off;
        float score = 0.0f;
        for (int i = 0; i < head_size; i++) score += qh[i] * k[i];
        a[t] = score / scale;
    }
    float max_val = a[0];
    for (int t = 1; t <= pos; t++) max_val = a[t] > max_val ? a[t] : max_val;
    float sum = 0.0f;
    for (int t = 0; t <= pos; t++) {
        a[t] = exp(a[t] - max_val);
        sum += a[t];
    }
    for (int t = 0; t <= pos; t++) a[t] /= sum;
    __global float* o = out + h * head_size;
    for (int i = 0; i < head_size; i++) o[i] = 0.0f;
    for (int t = 0; t <= pos; t++) {
        __global const float* v = value_cache + (size_t)t * kv_dim + kv_off;
        const float w = a[t];
        for (int i = 0; i < head_size; i++) o[i] += w * v[i];
    }
#else
    // GPU shape: one work-group per head; positions are spread over the work-items for the scores and
    // the softmax, then (position-slice, dimension) pairs for the weighted sum of values.
    __local float scratch[LOCAL];
    const int h = get_group_id(0);
    const int lid = get_local_id(0);
    __global const float* qh = q + h * head_size;
    __global float* a = att + (size_t)h * seq_len;
    const size_t kv_off = (size_t)(h / kv_mul) * head_size;
    float local_max = -INFINITY;
    for (int t = lid; t <= pos; t += LOCAL) {
        __global const float* k = key_cache + (size_t)t * kv_dim + kv_off;
        float score = 0.0f;
        for (int i = 0; i < head_size; i++) score += qh[i] * k[i];
        score /= scale;
        a[t] = score;
        local_max = fmax(local_max, score);
    }
    const float max_val = group_reduce(local_max, 1, scratch);
    float local_sum = 0.0f;
    for (int t = lid; t <= pos; t += LOCAL) {
        const float e = exp(a[t] - max_val);
        a[t] = e;
        local_sum += e;
    }
    const float inv_sum = 1.0f / group_reduce(local_sum, 0, scratch);
    barrier(CLK_GLOBAL_MEM_FENCE);  // every score of this head is in `a` before anyone reads them

    // parts work-item groups of head_size each take every parts-th position; their sums meet in scratch.
    const int width = head_size < LOCAL ? head_size : LOCAL;
    const int parts = LOCAL / width;
    const int part = lid / width;
    for (int i = lid % width; i < head_size; i += width) {
        float acc = 0.0f;
        for (int t = part; t <= pos; t += parts) acc += a[t] * value_cache[(size_t)t * kv_dim + kv_off + i];
        if (parts == 1) {
            // Work-items past the first `width` (head_size < LOCAL < 2 head_size) hold no valid slice.
            if (part == 0) out[h * head_size + i] = acc * inv_sum;
            continue;
        }
        scratch[lid] = part < parts ? acc : 0.0f;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (part == 0) {
            float total = 0.0f;
            for (int p = 0; p < parts; p++) total += scratch[p * width + i];
            out[h * head_size + i] = total * inv_sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
}
