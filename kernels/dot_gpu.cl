// The GPU family's (SHAPE_GPU) RMSNorm scale and dot products: ROW_THREADS work-items share a row, the
// work-group the norm's sum of squares.
#if SHAPE_FAMILY == SHAPE_GPU
// RMSNorm's scale 1/sqrt(mean(x^2) + eps), computed by the whole work-group (ORDERED_SUMS: a round of
// LOCAL squares at a time, added in run.c's order by its first work-item).
inline float rms_scale(__global const float* x, int n, __local float* scratch) {
#ifdef ORDERED_SUMS
    const int lid = get_local_id(0);
    float ss = 0.0f;
    for (int j0 = 0; j0 < n; j0 += LOCAL) {
        scratch[lid] = j0 + lid < n ? x[j0 + lid] * x[j0 + lid] : 0.0f;
        add_round_in_order(&ss, scratch, min(LOCAL, n - j0));
    }
    return first_items(rms_from_sum(ss, n), scratch);
#else
    float ss = 0.0f;
    for (int j = get_local_id(0); j < n; j += LOCAL) ss += x[j] * x[j];
    ss = group_reduce(ss, 0, scratch);
    return rms_from_sum(ss, n);
#endif
}

// a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w, added in that order (the first addition: shape.cl's
// add_lanes).
inline float dot4(float4 a, float4 b) {
    const float4 p = a * b;
    return add_lanes(p.x, p.y) + p.z + p.w;
}

#ifdef FLOAT_WEIGHTS  // (Q8_0 rows: dot_quantized.cl)
// This lane's part of dot(w, in) over n elements.
inline float partial_dot(__global const weight_t* w, __global const float* in, int n, int lane) {
    float sum = 0.0f;
    const int n4 = n / 4;
    for (int j = lane; j < n4; j += ROW_THREADS) sum += dot4(WEIGHT4(w, j), vload4(j, in));
    for (int j = 4 * n4 + lane; j < n; j += ROW_THREADS) sum += WEIGHT(w, j) * in[j];
    return sum;
}

// As partial_dot, with the input normalized on the fly: in[j] = weight[j] * (ss * x[j]).
inline float partial_dot_normed(__global const weight_t* w, __global const float* x, __global const float* weight,
                                float ss, int n, int lane) {
    float sum = 0.0f;
    const int n4 = n / 4;
    for (int j = lane; j < n4; j += ROW_THREADS) {
        const float4 a = WEIGHT4(w, j), g = vload4(j, weight), v = vload4(j, x);
        sum += dot4(a, g * (ss * v));
    }
    for (int j = 4 * n4 + lane; j < n; j += ROW_THREADS) sum += WEIGHT(w, j) * (weight[j] * (ss * x[j]));
    return sum;
}
#endif
#endif
