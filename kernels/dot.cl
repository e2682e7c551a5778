// Every family's row products with the (normalized, staged) input, built on dot_cpu.cl or dot_gpu.cl,
// for the float formats (FLOAT_WEIGHTS). Q8_0's (dot_quantized.cl) have the same three: stage_input, row_dot and
// row_pair.

// Writes rmsnorm(x) * weight to out; called by one work-group so the normalized vector can be
// inspected (--compare-cpu) without another kernel.
inline void write_norm(__global float* out, __global const float* x, __global const float* weight, float ss, int n) {
    for (int j = get_local_id(0); j < n; j += LOCAL) out[j] = weight[j] * (ss * x[j]);
}

#ifdef FEW_GROUPS
// The token kernel stages a step's input in the work-group's first unit of the step, after that unit has
// issued its first weight loads (float weights: a batch; Q8_0: each row's first group of the lane), which
// do not depend on the input, so that the two waits on memory overlap rather than follow each other. A
// unit learns it from a negative staged_n: the input is not staged yet, and row_dot and row_pair stage it.
// (token.cl defines it: n floats of x, normalized with `weight` when given, staged by stage_input.)
void stage_step_input(__local float* staged, __global const float* x, __global const float* weight, int n,
                      __local float* scratch);
#endif

#ifdef FLOAT_WEIGHTS
// GPU shapes: the work-group copies its input vector (normalized on the way when `weight` is given)
// into local memory once, so the rows' dot products read it from there instead of re-reading x, the norm
// weights and doing the normalization per element for every row. Needs every work-item.
inline void stage_input(__local float* staged, __global const float* x, __global const float* weight, float ss,
                        int n) {
    for (int j = get_local_id(0); j < n; j += LOCAL) staged[j] = weight ? weight[j] * (ss * x[j]) : x[j];
    barrier(CLK_LOCAL_MEM_FENCE);
}

// Weight loads a work-item issues before it uses the first of them: a matrix with few rows (wo and w2,
// every matrix of a small model) gives each compute unit too few work-items to hide memory latency one
// load at a time. The host picks it per launch (dot_batch in kernel_set.hpp; the token kernel's:
// KernelSet::token_program). The sum is formed in the simple loop's order.
#ifndef DOT_BATCH
#define DOT_BATCH 8
#endif

// A row's lanes read consecutive spans of weights (weights.cl: a float, or two halves, per 4-byte load),
// lane l spans l, l + ROW_THREADS, ... from the row's first 4-byte boundary, so each load instruction of
// a warp reads whole 32-byte sectors (with 8 or more lanes and rows of a multiple of 8 floats, as the GPU
// shapes and real models have); a float4 per lane is compiled by NVIDIA into four scalar loads at a
// 16-byte stride, each instruction touching four times the sectors for the same bytes. The at most
// WEIGHT_SPAN weights outside the spans (halves: a row of odd length, or one that starts between two
// words) are lane 0's (row_edges).
inline int row_spans(__global const weight_t* w, int n) { return (n - span_head(w)) / WEIGHT_SPAN; }

// Adds to sum this lane's products of the row's weights outside its spans.
inline float row_edges(__global const weight_t* w, __local const float* in, int n, int lane, float sum) {
#if WEIGHT_SPAN > 1
    if (lane != 0) return sum;
    const int head = span_head(w);
    for (int j = 0; j < head; j++) sum += WEIGHT(w, j) * in[j];
    for (int j = head + WEIGHT_SPAN * row_spans(w, n); j < n; j++) sum += WEIGHT(w, j) * in[j];
#endif
    return sum;
}

// This lane's part of the products of `spans` spans from span j on (w and in from the row's first span)
// with the input, added to sum.
inline float dot_staged_from(__global const weight_t* w, __local const float* in, int spans, int j, float sum) {
    for (; j + (DOT_BATCH - 1) * ROW_THREADS < spans; j += DOT_BATCH * ROW_THREADS) {
        weight_span_t a[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) a[k] = WEIGHT_SPAN_AT(w, j + k * ROW_THREADS);
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) sum = span_dot(sum, a[k], in, j + k * ROW_THREADS);
    }
    // The rest (fewer spans than a batch for this lane) as one more batch of loads issued together, not
    // one load per trip to memory: most of a small model's rows is rest.
    if (j < spans) {
        weight_span_t a[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++)
            a[k] = j + k * ROW_THREADS < spans ? WEIGHT_SPAN_AT(w, j + k * ROW_THREADS) : WEIGHT_SPAN_ZERO;
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++)
            if (j + k * ROW_THREADS < spans) sum = span_dot(sum, a[k], in, j + k * ROW_THREADS);
    }
    return sum;
}

#ifdef FEW_GROUPS
// The token kernel's rows are whole spans from their start (weights.cl), so a row of n weights is
// n / WEIGHT_SPAN spans.

// The lane's first batch of a row of `spans` spans, masked as the rest is, and its sum: dot_staged_from's
// first trip, apart, so that it can be loaded before the input is staged.
inline void load_first_batch(__private weight_span_t* a, __global const weight_t* w, int spans, int lane) {
#pragma unroll
    for (int k = 0; k < DOT_BATCH; k++)
        a[k] = lane + k * ROW_THREADS < spans ? WEIGHT_SPAN_AT(w, lane + k * ROW_THREADS) : WEIGHT_SPAN_ZERO;
}
inline float first_batch_dot(__private const weight_span_t* a, __local const float* in, int spans, int lane) {
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < DOT_BATCH; k++)
        if (lane + k * ROW_THREADS < spans) sum = span_dot(sum, a[k], in, lane + k * ROW_THREADS);
    return sum;
}

// dot_staged_from of two rows, wa's in x and wb's in y, each batch's loads of both rows issued together: a
// unit that needs two rows (w1's and w3's, a RoPE pair) would otherwise wait on memory twice, the second
// row's loads held behind the first row's reduction. Each sum is formed in dot_staged_from's order.
inline float2 dot2_staged_from(__global const weight_t* wa, __global const weight_t* wb, __local const float* in,
                               int spans, int j, float2 sum) {
    for (; j + (DOT_BATCH - 1) * ROW_THREADS < spans; j += DOT_BATCH * ROW_THREADS) {
        weight_span_t a[DOT_BATCH], b[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) {
            a[k] = WEIGHT_SPAN_AT(wa, j + k * ROW_THREADS);
            b[k] = WEIGHT_SPAN_AT(wb, j + k * ROW_THREADS);
        }
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) {
            sum.x = span_dot(sum.x, a[k], in, j + k * ROW_THREADS);
            sum.y = span_dot(sum.y, b[k], in, j + k * ROW_THREADS);
        }
    }
    if (j < spans) {
        weight_span_t a[DOT_BATCH], b[DOT_BATCH];
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++) {
            const int inside = j + k * ROW_THREADS < spans;
            a[k] = inside ? WEIGHT_SPAN_AT(wa, j + k * ROW_THREADS) : WEIGHT_SPAN_ZERO;
            b[k] = inside ? WEIGHT_SPAN_AT(wb, j + k * ROW_THREADS) : WEIGHT_SPAN_ZERO;
        }
#pragma unroll
        for (int k = 0; k < DOT_BATCH; k++)
            if (j + k * ROW_THREADS < spans) {
                sum.x = span_dot(sum.x, a[k], in, j + k * ROW_THREADS);
                sum.y = span_dot(sum.y, b[k], in, j + k * ROW_THREADS);
            }
    }
    return sum;
}
#endif

// One row's dot product with the (normalized) input: from local memory when the work-group staged it
// (staged_n > 0, GPU shapes with room for the vector; FEW_GROUPS: staged_n < 0 stages it first), else
// straight from global memory.
inline float row_dot(__global const weight_t* w, __global const float* x, __global const float* weight, float ss,
                     __local float* staged, int staged_n, int n, int lane, __local float* scratch) {
#ifdef FEW_GROUPS
    if (staged_n != 0) {
        const int spans = n / WEIGHT_SPAN;
        weight_span_t a[DOT_BATCH];
        load_first_batch(a, w, spans, lane);
        if (staged_n < 0) stage_step_input(staged, x, weight, n, scratch);
        return dot_staged_from(w, staged, spans, lane + DOT_BATCH * ROW_THREADS,
                               first_batch_dot(a, staged, spans, lane));
    }
#endif
    if (staged_n > 0) {
        const int head = span_head(w);
        return row_edges(w, staged, n, lane, dot_staged_from(w + head, staged + head, row_spans(w, n), lane, 0.0f));
    }
    return weight ? partial_dot_normed(w, x, weight, ss, n, lane) : partial_dot(w, x, n, lane);
}

// Two rows' dot products with the same input (x: wa's, y: wb's), summed over their lanes (row_sum). Builds
// with FEW_GROUPS load both rows together and reduce them in one tree; the per-op kernels take one row
// at a time, as twice the loads in flight would cost them registers. With FEW_GROUPS, scratch holds
// 2 * LOCAL floats.
inline float2 row_pair(__global const weight_t* wa, __global const weight_t* wb, __global const float* x,
                       __global const float* weight, float ss, __local float* staged, int staged_n, int n,
                       int lane, __local float* scratch) {
#ifdef FEW_GROUPS
    if (staged_n != 0) {
        const int spans = n / WEIGHT_SPAN;
        weight_span_t a[DOT_BATCH], b[DOT_BATCH];
        load_first_batch(a, wa, spans, lane);
        load_first_batch(b, wb, spans, lane);
        if (staged_n < 0) stage_step_input(staged, x, weight, n, scratch);
        const float2 first =
            (float2)(first_batch_dot(a, staged, spans, lane), first_batch_dot(b, staged, spans, lane));
        return row_sum2(dot2_staged_from(wa, wb, staged, spans, lane + DOT_BATCH * ROW_THREADS, first), scratch);
    }
#endif
#if SHAPE_FAMILY == SHAPE_EXACT
    return partial_dot2(wa, wb, x, weight, ss, n);  // (a row a work-item: no lanes to sum)
#else
    const float a = row_sum(row_dot(wa, x, weight, ss, staged, staged_n, n, lane, scratch), scratch);
    const float b = row_sum(row_dot(wb, x, weight, ss, staged, staged_n, n, lane, scratch), scratch);
    return (float2)(a, b);
#endif
}
#endif
