// Prefill's matrix-matrix products for Q8_0 weights (prefill.cl's for the float formats): each position's
// input is quantized first (quantize_rows) into a row laid out as a weight row, and every output element
// is runq.c's matmul of the two, its groups' terms ((float)ival * w_scale) * x_scale added in order, so a
// prefilled position's values are the decode kernels' on the CPU families and runq.c's matmul on every
// family. The products are not fused: RoPE and SwiGLU are kernels of their own (rope_rows, swiglu).
#ifdef WEIGHT_Q8_0

// Each position's row of x (positions x n floats) quantized as stage_input quantizes a decode step's
// input, into row p of `out` (rows of Q8_ROW_BYTES(n) bytes: the values as weights.cl lays them out,
// then the scales): one work-group per position, through `staged` (KernelSet::staged_space(n)).
__kernel void quantize_rows(__global const float* x, __global weight_t* out, int n, __local float* staged) {
    const size_t p = get_group_id(0);
    stage_input(staged, x + p * n, 0, 0.0f, n);
    __global weight_t* row = WEIGHT_ROW(out, p, n);
    __local const char* values = STAGED_VALUES(staged, n);
    for (int j = get_local_id(0); j < n; j += LOCAL) row[j] = values[j];
    for (int g = get_local_id(0); g < n / GROUP_SIZE; g += LOCAL) ((__global float*)(row + n))[g] = staged[g];
}

// out[p][r] = w[r] . in[p] for `rows` rows of n weights and `positions` quantized positions (quantize_rows'
// rows), out's rows starting at out_offset; with `accumulate`, added to what out holds (the residual: the
// sum formed first, as runq.c does).
#if SHAPE_FAMILY != SHAPE_GPU
// CPU families: a work-item takes GEMM_ROWS consecutive rows and walks all positions Q8_GEMM_POSITIONS at a
// time, its rows staying in the core's cache while every position reads them. Rows and positions past
// the end are clamped for the loads and not stored.
#define Q8_GEMM_POSITIONS 4
__kernel void gemm(__global const weight_t* w, __global const weight_t* in, __global float* out, int out_offset, int n,
                   int rows, int positions, int accumulate) {
    const int groups = n / GROUP_SIZE;
    FOR_GROUP_UNITS(unit, (rows + GEMM_ROWS - 1) / GEMM_ROWS) {
        ROW_SETUP(unit, (rows + GEMM_ROWS - 1) / GEMM_ROWS);
        if (!row_valid) continue;
        const int r0 = row * GEMM_ROWS;
        __global const weight_t* wr[GEMM_ROWS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; i++) wr[i] = WEIGHT_ROW(w, min(r0 + i, rows - 1), n);
        for (int p0 = 0; p0 < positions; p0 += Q8_GEMM_POSITIONS) {
            __global const weight_t* xp[Q8_GEMM_POSITIONS];
#pragma unroll
            for (int k = 0; k < Q8_GEMM_POSITIONS; k++) xp[k] = WEIGHT_ROW(in, min(p0 + k, positions - 1), n);
            float acc[GEMM_ROWS][Q8_GEMM_POSITIONS];
#pragma unroll
            for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                for (int k = 0; k < Q8_GEMM_POSITIONS; k++) acc[i][k] = 0.0f;
            for (int g = 0; g < groups; g++) {
                int dots[GEMM_ROWS][Q8_GEMM_POSITIONS];
#pragma unroll
                for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                    for (int k = 0; k < Q8_GEMM_POSITIONS; k++) dots[i][k] = 0;
                for (int word = 0; word < GROUP_SIZE / 4; word++) {
                    const int at = q8_int(groups, g, word);
                    int a[GEMM_ROWS], b[Q8_GEMM_POSITIONS];
#pragma unroll
                    for (int i = 0; i < GEMM_ROWS; i++) a[i] = ((__global const int*)wr[i])[at];
#pragma unroll
                    for (int k = 0; k < Q8_GEMM_POSITIONS; k++) b[k] = ((__global const int*)xp[k])[at];
#pragma unroll
                    for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                        for (int k = 0; k < Q8_GEMM_POSITIONS; k++) dots[i][k] = dot_words(a[i], b[k], dots[i][k]);
                }
#pragma unroll
                for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                    for (int k = 0; k < Q8_GEMM_POSITIONS; k++)
                        acc[i][k] += (float)dots[i][k] * Q8_SCALES(wr[i], n)[g] * Q8_SCALES(xp[k], n)[g];
            }
#pragma unroll
            for (int i = 0; i < GEMM_ROWS; i++) {
#pragma unroll
                for (int k = 0; k < Q8_GEMM_POSITIONS; k++) {
                    if (r0 + i < rows && p0 + k < positions) {
                        __global float* o = out + out_offset + (size_t)(p0 + k) * rows + r0 + i;
                        *o = accumulate ? *o + acc[i][k] : acc[i][k];
                    }
                }
            }
        }
    }
}
#else
// GPU family: a work-group of GEMM_GROUP x GEMM_GROUP work-items computes a tile of GEMM_TILE rows by
// GEMM_TILE positions (the shape's own build's tile, gemm_gpu.cl's default: KernelSet::gemm), each
// work-item GEMM_BLOCK x GEMM_BLOCK of it (rows and positions GEMM_GROUP apart). Group by group, the
// tile's words pass through local memory Q8_TILE_WORDS at a time and each work-item forms its elements'
// integer dot products; then the group's scales fold them into the sums.
#if GEMM_TR != GEMM_TP
#error "Q8_0's gemm computes square tiles"
#endif
#define GEMM_TILE GEMM_TR
#define GEMM_BLOCK (GEMM_TILE / GEMM_GROUP)
#define Q8_TILE_WORDS (GROUP_SIZE / 4 < 16 ? GROUP_SIZE / 4 : 16)
__kernel void gemm(__global const weight_t* w, __global const weight_t* in, __global float* out, int out_offset, int n,
                   int rows, int positions, int accumulate) {
    __local int wt[Q8_TILE_WORDS][GEMM_TILE + 1], xt[Q8_TILE_WORDS][GEMM_TILE + 1];
    __local float ws[GEMM_TILE], xs[GEMM_TILE];
    const int lr = get_local_id(0), lp = get_local_id(1), flat = lp * GEMM_GROUP + lr;
    const int r0 = get_group_id(0) * GEMM_TILE, p0 = get_group_id(1) * GEMM_TILE;
    const int groups = n / GROUP_SIZE;
    float acc[GEMM_BLOCK][GEMM_BLOCK];
#pragma unroll
    for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
        for (int k = 0; k < GEMM_BLOCK; k++) acc[i][k] = 0.0f;
    for (int g = 0; g < groups; g++) {  // (the same trips for every work-item: barriers)
        for (int t = flat; t < GEMM_TILE; t += GEMM_GROUP * GEMM_GROUP) {
            ws[t] = r0 + t < rows ? Q8_SCALES(WEIGHT_ROW(w, r0 + t, n), n)[g] : 0.0f;
            xs[t] = p0 + t < positions ? Q8_SCALES(WEIGHT_ROW(in, p0 + t, n), n)[g] : 0.0f;
        }
        int dots[GEMM_BLOCK][GEMM_BLOCK];
#pragma unroll
        for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
            for (int k = 0; k < GEMM_BLOCK; k++) dots[i][k] = 0;
        for (int word0 = 0; word0 < GROUP_SIZE / 4; word0 += Q8_TILE_WORDS) {
            for (int e = flat; e < GEMM_TILE * Q8_TILE_WORDS; e += GEMM_GROUP * GEMM_GROUP) {
                const int t = e / Q8_TILE_WORDS, kk = e % Q8_TILE_WORDS, word = word0 + kk;
                const int at = q8_int(groups, g, word);
                const int inside = word < GROUP_SIZE / 4;
                wt[kk][t] = inside && r0 + t < rows ? ((__global const int*)WEIGHT_ROW(w, r0 + t, n))[at] : 0;
                xt[kk][t] = inside && p0 + t < positions ? ((__global const int*)WEIGHT_ROW(in, p0 + t, n))[at] : 0;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
            const int steps = min(Q8_TILE_WORDS, GROUP_SIZE / 4 - word0);
            for (int kk = 0; kk < steps; kk++) {
                int a[GEMM_BLOCK], b[GEMM_BLOCK];
#pragma unroll
                for (int i = 0; i < GEMM_BLOCK; i++) a[i] = wt[kk][lr + i * GEMM_GROUP];
#pragma unroll
                for (int k = 0; k < GEMM_BLOCK; k++) b[k] = xt[kk][lp + k * GEMM_GROUP];
#pragma unroll
                for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
                    for (int k = 0; k < GEMM_BLOCK; k++) dots[i][k] = dot_words(a[i], b[k], dots[i][k]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);  // the next words overwrite what these products read
        }
#pragma unroll
        for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
            for (int k = 0; k < GEMM_BLOCK; k++)
                acc[i][k] += (float)dots[i][k] * ws[lr + i * GEMM_GROUP] * xs[lp + k * GEMM_GROUP];
        barrier(CLK_LOCAL_MEM_FENCE);  // the next group's scales overwrite these
    }
#pragma unroll
    for (int i = 0; i < GEMM_BLOCK; i++) {
#pragma unroll
        for (int k = 0; k < GEMM_BLOCK; k++) {
            const int r = r0 + lr + i * GEMM_GROUP, p = p0 + lp + k * GEMM_GROUP;
            if (r < rows && p < positions) {
                __global float* o = out + out_offset + (size_t)p * rows + r;
                *o = accumulate ? *o + acc[i][k] : acc[i][k];
            }
        }
    }
}
#endif

// RoPE of every position of the batch, in place: q (positions, dim) and the keys the batch wrote to the
// cache (positions from pos on, kv_dim each), one (even, odd) pair per work-item.
__kernel void rope_rows(__global float* q, __global float* key_cache, __global const float* rope, int dim, int kv_dim,
                        int head_size, int pos, int positions) {
    const int pair = get_global_id(0), p = get_global_id(1);
    if (pair >= (dim + kv_dim) / 2 || p >= positions) return;
    int r = 2 * pair;
    __global float* v = q + (size_t)p * dim;
    if (r >= dim) {
        r -= dim;
        v = key_cache + (size_t)(pos + p) * kv_dim;
    }
    rope_pair(v, r, v[r], v[r + 1], rope + (size_t)(pos + p) * head_size + 2 * ((r % head_size) / 2));
}

// SwiGLU of `count` elements in place: gate = silu(gate) * up.
__kernel void swiglu(__global float* gate, __global const float* up, int count) {
    const int i = get_global_id(0);
    if (i < count) gate[i] = swiglu_of(gate[i], up[i]);
}
#endif
