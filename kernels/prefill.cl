// Prefill: a batch of `positions` consecutive positions through a layer at once, as matrix-matrix products,
// so that each weight is read once per batch rather than once per position. Activations are row-major
// (positions, width): position p's vector starts at p * width. The products are gemm_block's (gemm_cpu.cl,
// gemm_gpu.cl: a block of rows by positions per work-item or work-group); the kernels below say which rows
// a block takes and what becomes of its sums: stored, added to the residual, rotated into the queries and
// the cache, or paired into SwiGLU (the decode kernels' rope_pair and swiglu_of: norm_matvec.cl). On the
// CPU families they are the decode kernels' bits. (Float weights; Q8_0's products, unfused: prefill_quantized.cl.)

// RMSNorm of each position's x, one work-group per position: out[p] = rmsnorm(x[p]) * weight, the
// expression the fused decode kernels multiply by, so the products below keep their bits.
__kernel void rmsnorm_rows(__global const float* x, __global const float* weight, __global float* out, int n) {
    __local float scratch[LOCAL];
    const size_t at = get_group_id(0) * (size_t)n;
    write_norm(out + at, x + at, weight, rms_scale(x + at, n, scratch), n);
}

#ifdef FLOAT_WEIGHTS
// out[p][r] = w[r] . in[p] for `rows` rows of n elements and `positions` positions, out's rows starting
// at out_offset; with `accumulate`, added to what out holds (the residual: the sum formed first, as
// run.c does). A block takes GEMM_BLOCK_ROWS consecutive rows, its halves gemm_block's two.
GEMM_KERNEL void gemm(__global const weight_t* w, __global const float* in, __global float* out, int out_offset,
                      int n, int rows, int positions, int accumulate) {
    GEMM_LOCALS;
    GEMM_FOR_BLOCKS(block, p0, (rows + GEMM_BLOCK_ROWS - 1) / GEMM_BLOCK_ROWS, positions) {
        float acc[GEMM_SLOTS_R][GEMM_SLOTS_P];
        const int r0 = block * GEMM_BLOCK_ROWS;
        gemm_block(w, r0, rows, w, r0 + GEMM_HALF, rows, 1, in, n, p0, positions, GEMM_LOCAL_ARGS, acc);
#pragma unroll
        for (int i = 0; i < GEMM_SLOTS_R; i++) {
#pragma unroll
            for (int k = 0; k < GEMM_SLOTS_P; k++) {
                const int second = i < GEMM_SLOTS_R / 2 ? 0 : 1;  // of the block's two halves
                const int r = r0 + second * GEMM_HALF + gemm_slot_row(i - second * (GEMM_SLOTS_R / 2));
                const int p = p0 + gemm_slot_pos(k);
                if (r < rows && p < positions) {
                    __global float* o = out + out_offset + (size_t)p * rows + r;
                    *o = accumulate ? *o + acc[i][k] : acc[i][k];
                }
            }
        }
    }
}

// The batch's queries, keys and values: q = wq . xn, k = wk . xn, v = wv . xn for every position, RoPE
// applied to q and k at positions pos, pos + 1, ... as attn_qkv_rope rotates them, k and v written to the
// cache's rows from pos on. Blocks of GEMM_BLOCK_ROWS rows of wq, then wk's, then wv's (a block never
// straddles two matrices), its even rows one half, the odd rows the other: a RoPE pair meets in one
// work-item.
GEMM_KERNEL void gemm_qkv_rope(__global const weight_t* wq, __global const weight_t* wk, __global const weight_t* wv,
                               __global const float* in, __global const float* rope, __global float* q,
                               __global float* key_cache, __global float* value_cache, int dim, int kv_dim,
                               int head_size, int pos, int positions) {
    GEMM_LOCALS;
    const int q_blocks = (dim + GEMM_BLOCK_ROWS - 1) / GEMM_BLOCK_ROWS;
    const int kv_blocks = (kv_dim + GEMM_BLOCK_ROWS - 1) / GEMM_BLOCK_ROWS;
    GEMM_FOR_BLOCKS(block, p0, q_blocks + 2 * kv_blocks, positions) {
        const int part = block < q_blocks ? 0 : block < q_blocks + kv_blocks ? 1 : 2;  // q, k, v
        const int r0 = (part == 0 ? block : (block - q_blocks) % kv_blocks) * GEMM_BLOCK_ROWS;
        __global const weight_t* w = part == 0 ? wq : part == 1 ? wk : wv;
        const int rows = part == 0 ? dim : kv_dim;
        float acc[GEMM_SLOTS_R][GEMM_SLOTS_P];
        gemm_block(w, r0, rows, w, r0 + 1, rows, 2, in, dim, p0, positions, GEMM_LOCAL_ARGS, acc);
#pragma unroll
        for (int i = 0; i < GEMM_SLOTS_R / 2; i++) {
#pragma unroll
            for (int k = 0; k < GEMM_SLOTS_P; k++) {
                const int r = r0 + 2 * gemm_slot_row(i), p = p0 + gemm_slot_pos(k);
                if (r >= rows || p >= positions) continue;  // (rows are even: so is r + 1 < rows)
                const float v0 = acc[i][k], v1 = acc[GEMM_SLOTS_R / 2 + i][k];
                if (part == 2) {
                    value_cache[(size_t)(pos + p) * kv_dim + r] = v0;
                    value_cache[(size_t)(pos + p) * kv_dim + r + 1] = v1;
                    continue;
                }
                __global float* o = part == 0 ? q + (size_t)p * dim : key_cache + (size_t)(pos + p) * kv_dim;
                rope_pair(o, r, v0, v1, rope + (size_t)(pos + p) * head_size + 2 * ((r % head_size) / 2));
            }
        }
    }
}

// The batch's FFN hidden state: hb[p] = silu(w1 . xn[p]) * (w3 . xn[p]), as ffn_gate_up computes it. A
// block takes GEMM_HALF rows of w1 and the same rows of w3.
GEMM_KERNEL void gemm_gate_up(__global const weight_t* w1, __global const weight_t* w3, __global const float* in,
                              __global float* hb, int dim, int hidden_dim, int positions) {
    GEMM_LOCALS;
    GEMM_FOR_BLOCKS(block, p0, (hidden_dim + GEMM_HALF - 1) / GEMM_HALF, positions) {
        const int r0 = block * GEMM_HALF;
        float acc[GEMM_SLOTS_R][GEMM_SLOTS_P];
        gemm_block(w1, r0, hidden_dim, w3, r0, hidden_dim, 1, in, dim, p0, positions, GEMM_LOCAL_ARGS, acc);
#pragma unroll
        for (int i = 0; i < GEMM_SLOTS_R / 2; i++) {
#pragma unroll
            for (int k = 0; k < GEMM_SLOTS_P; k++) {
                const int r = r0 + gemm_slot_row(i), p = p0 + gemm_slot_pos(k);
                if (r >= hidden_dim || p >= positions) continue;
                hb[(size_t)p * hidden_dim + r] = swiglu_of(acc[i][k], acc[GEMM_SLOTS_R / 2 + i][k]);
            }
        }
    }
}

#endif  // FLOAT_WEIGHTS

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
