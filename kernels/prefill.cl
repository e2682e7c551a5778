// Prefill: a batch of `positions` consecutive positions through a layer at once, as matrix-matrix products,
// so that each weight is read once per batch rather than once per position. Activations are row-major
// (positions, width): position p's vector starts at p * width. On the CPU families every output element
// sums its terms in partial_dot's order (run.c's on the exact family), so a prefilled position's values
// are the decode kernels' bit for bit; on the GPU family each element sums in run.c's order.

// The host always defines them (KernelSet); the defaults only keep the program buildable on its own.
#ifndef GEMM_ROWS
#define GEMM_ROWS 4
#endif
#ifndef GEMM_GROUP
#define GEMM_GROUP 16
#endif
#ifndef GEMM_TILE
#define GEMM_TILE 64
#endif

// RMSNorm of each position's x, one work-group per position: out[p] = rmsnorm(x[p]) * weight, the
// expression the fused decode kernels multiply by, so the products below keep their bits.
__kernel void rmsnorm_rows(__global const float* x, __global const float* weight, __global float* out, int n) {
    __local float scratch[LOCAL];
    const size_t at = get_group_id(0) * (size_t)n;
    write_norm(out + at, x + at, weight, rms_scale(x + at, n, scratch), n);
}

// out[p][r] = w[r] . in[p] for `rows` rows of n elements and `positions` positions, out's rows starting
// at out_offset; with `accumulate`, added to what out holds (the residual: the sum formed first, as
// run.c does). (Float weights; Q8_0's: prefill_q8.cl.)
#ifdef FLOAT_WEIGHTS
#if SHAPE_FAMILY != SHAPE_GPU
// CPU families: a work-item takes GEMM_ROWS consecutive rows and walks all positions GEMM_POSITIONS at a
// time, so its rows stay in the core's cache while every position reads them; its floatv accumulators
// (GEMM_ROWS x GEMM_POSITIONS) are registers. Rows and positions past the end are clamped for the loads
// and not stored. (The host defines GEMM_ROWS, GEMM_GROUP and GEMM_TILE: KernelSet::kGemmRows, ...)
#define GEMM_POSITIONS 4
#if SHAPE_FAMILY == SHAPE_EXACT
#define GEMM_MAD(a, b, acc) ((acc) + (a) * (b))  // run.c's sum += w * x
#define GEMM_SUM(acc) (acc)
#else
#define GEMM_MAD(a, b, acc) mad(a, b, acc)  // partial_dot's steps
#define GEMM_SUM(acc) hsum(acc)
#endif
__kernel void gemm(__global const weight_t* w, __global const float* in, __global float* out, int out_offset, int n,
                   int rows, int positions, int accumulate) {
    FOR_GROUP_UNITS(unit, (rows + GEMM_ROWS - 1) / GEMM_ROWS) {
        ROW_SETUP(unit, (rows + GEMM_ROWS - 1) / GEMM_ROWS);
        if (!row_valid) continue;
        const int r0 = row * GEMM_ROWS;
        __global const weight_t* wr[GEMM_ROWS];
#pragma unroll
        for (int i = 0; i < GEMM_ROWS; i++) wr[i] = WEIGHT_ROW(w, min(r0 + i, rows - 1), n);
        for (int p0 = 0; p0 < positions; p0 += GEMM_POSITIONS) {
            __global const float* xp[GEMM_POSITIONS];
#pragma unroll
            for (int k = 0; k < GEMM_POSITIONS; k++) xp[k] = in + (size_t)min(p0 + k, positions - 1) * n;
            floatv acc[GEMM_ROWS][GEMM_POSITIONS];
#pragma unroll
            for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                for (int k = 0; k < GEMM_POSITIONS; k++) acc[i][k] = (floatv)(0.0f);
            int j = 0;
            for (; j + VECTOR_WIDTH <= n; j += VECTOR_WIDTH) {
                floatv a[GEMM_ROWS], b[GEMM_POSITIONS];
#pragma unroll
                for (int i = 0; i < GEMM_ROWS; i++) a[i] = WEIGHTV(wr[i], j);
#pragma unroll
                for (int k = 0; k < GEMM_POSITIONS; k++) b[k] = vloadv(xp[k] + j);
#pragma unroll
                for (int i = 0; i < GEMM_ROWS; i++)
#pragma unroll
                    for (int k = 0; k < GEMM_POSITIONS; k++) acc[i][k] = GEMM_MAD(a[i], b[k], acc[i][k]);
            }
#pragma unroll
            for (int i = 0; i < GEMM_ROWS; i++) {
#pragma unroll
                for (int k = 0; k < GEMM_POSITIONS; k++) {
                    float sum = GEMM_SUM(acc[i][k]);
                    for (int t = j; t < n; t++) sum = GEMM_MAD(WEIGHT(wr[i], t), xp[k][t], sum);
                    if (r0 + i < rows && p0 + k < positions) {
                        __global float* o = out + out_offset + (size_t)(p0 + k) * rows + r0 + i;
                        *o = accumulate ? *o + sum : sum;
                    }
                }
            }
        }
    }
}
#else
// GPU family: a work-group of GEMM_GROUP x GEMM_GROUP work-items computes a tile of GEMM_TILE rows by
// GEMM_TILE positions, each work-item GEMM_BLOCK x GEMM_BLOCK of it in registers (rows and positions
// GEMM_GROUP apart, so that its local-memory reads do not collide). The tile's weights and inputs pass
// through local memory GEMM_TILE_K elements at a time, read by consecutive work-items along a row
// (coalesced); each element still sums its terms in order, the tail of a row included.
#define GEMM_BLOCK (GEMM_TILE / GEMM_GROUP)
#define GEMM_TILE_K 16
// (No reqd_work_group_size: a device whose work-groups hold fewer than GEMM_GROUP^2 work-items must
// still build the program for its decode kernels.)
__kernel void gemm(__global const weight_t* w, __global const float* in, __global float* out, int out_offset, int n, int rows,
          int positions, int accumulate) {
    __local float wt[GEMM_TILE_K][GEMM_TILE + 1], xt[GEMM_TILE_K][GEMM_TILE + 1];
    const int lr = get_local_id(0), lp = get_local_id(1), flat = lp * GEMM_GROUP + lr;
    const int r0 = get_group_id(0) * GEMM_TILE, p0 = get_group_id(1) * GEMM_TILE;
    float acc[GEMM_BLOCK][GEMM_BLOCK];
#pragma unroll
    for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
        for (int k = 0; k < GEMM_BLOCK; k++) acc[i][k] = 0.0f;
    for (int j0 = 0; j0 < n; j0 += GEMM_TILE_K) {
        for (int e = flat; e < GEMM_TILE * GEMM_TILE_K; e += GEMM_GROUP * GEMM_GROUP) {
            const int t = e / GEMM_TILE_K, jj = e % GEMM_TILE_K, j = j0 + jj;
            wt[jj][t] = r0 + t < rows && j < n ? WEIGHT(WEIGHT_ROW(w, r0 + t, n), j) : 0.0f;
            xt[jj][t] = p0 + t < positions && j < n ? in[(size_t)(p0 + t) * n + j] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        const int steps = min(GEMM_TILE_K, n - j0);
        for (int jj = 0; jj < steps; jj++) {
            float a[GEMM_BLOCK], b[GEMM_BLOCK];
#pragma unroll
            for (int i = 0; i < GEMM_BLOCK; i++) a[i] = wt[jj][lr + i * GEMM_GROUP];
#pragma unroll
            for (int k = 0; k < GEMM_BLOCK; k++) b[k] = xt[jj][lp + k * GEMM_GROUP];
#pragma unroll
            for (int i = 0; i < GEMM_BLOCK; i++)
#pragma unroll
                for (int k = 0; k < GEMM_BLOCK; k++) acc[i][k] += a[i] * b[k];
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the next tile overwrites what this one's products read
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
#endif

// RoPE of every position of the batch, in place: q (positions, dim) and the keys the batch wrote to the
// cache (positions from pos on, kv_dim each), one (even, odd) pair per work-item, as attn_qkv_rope rotates them.
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
    __global const float* cs = rope + (size_t)(pos + p) * head_size + 2 * ((r % head_size) / 2);
    const float fcr = cs[0], fci = cs[1], v0 = v[r], v1 = v[r + 1];
    v[r] = v0 * fcr - v1 * fci;
    v[r + 1] = v0 * fci + v1 * fcr;
}

// SwiGLU of `count` elements in place: gate = silu(gate) * up, as ffn_gate_up computes it.
__kernel void swiglu(__global float* gate, __global const float* up, int count) {
    const int i = get_global_id(0);
    if (i >= count) return;
    float val = gate[i];
    val *= (1.0f / (1.0f + model_exp(-val)));  // silu, as run.c writes it
    gate[i] = val * up[i];
}

// Causal attention of the batch's positions pos, pos + 1, ... over the cache, which holds their keys and
// values already: position pos + p attends to cache positions 0..pos + p. One work-item per (head,
// position), running attention_head with the position's own query, output and scores (att: positions x
// n_heads x seq_len).
__kernel void attention_rows(__global const float* q, __global const float* key_cache, __global const float* value_cache,
                             __global float* att, __global float* out, int n_heads, int head_size, int kv_dim,
                             int kv_mul, int seq_len, int pos, int positions) {
    const int h = get_global_id(0), p = get_global_id(1);
    if (h >= n_heads || p >= positions) return;
    const int dim = n_heads * head_size;
    attention_head(h, q + (size_t)p * dim, key_cache, value_cache, att + (size_t)p * n_heads * seq_len,
                   out + (size_t)p * dim, n_heads, head_size, kv_dim, kv_mul, seq_len, pos + p);
}
