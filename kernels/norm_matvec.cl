// Matrix-vector products whose input is RMSNorm(x), the norm folded in (each work-group recomputes the
// scale from x instead of a separate normalization kernel and buffer round trip). `staged` is local
// memory for the normalized input when staged_n > 0 (see stage_input in dot.cl and dot_quantized.cl).

// RoPE's rotation of the pair (v0, v1) by its frequency's cos fcr and sin fci, as run.c writes it; and
// stored at rows r, r + 1 of o, with cs the frequency's (cos, sin). Prefill's kernels rotate with them too.
inline float2 rope_rotate(float v0, float v1, float fcr, float fci) {
    return (float2)(v0 * fcr - v1 * fci, v0 * fci + v1 * fcr);
}
inline void rope_pair(__global float* o, int r, float v0, float v1, __global const float* cs) {
    const float2 v = rope_rotate(v0, v1, cs[0], cs[1]);
    o[r] = v.x;
    o[r + 1] = v.y;
}

// SwiGLU of a gate and its up projection: silu(gate) * up, as run.c writes it.
inline float swiglu_of(float gate, float up) {
    gate *= (1.0f / (1.0f + model_exp(-gate)));
    return gate * up;
}

// Row r of the stacked [wq; wk; wv] (r made the row within its matrix): its part, 0 for q, 1 for k, 2 for v.
inline int qkv_part(__private int* r, int dim, int kv_dim) {
    if (*r >= dim + kv_dim) { *r -= dim + kv_dim; return 2; }
    if (*r >= dim) { *r -= dim; return 1; }
    return 0;
}

// Rows r and r + 1 of `part`, v0 and v1, stored: v's as they are, q's and k's rotated by their
// frequency's cos fcr and sin fci.
inline void store_qkv_pair(int part, int r, float v0, float v1, float fcr, float fci, __global float* q,
                           __global float* key_cache, __global float* value_cache, int kv_dim, int pos) {
    if (part == 2) {
        value_cache[(size_t)pos * kv_dim + r] = v0;
        value_cache[(size_t)pos * kv_dim + r + 1] = v1;
        return;
    }
    const float2 rotated = rope_rotate(v0, v1, fcr, fci);
    __global float* out = part == 0 ? q : key_cache + (size_t)pos * kv_dim;
    out[r] = rotated.x;
    out[r + 1] = rotated.y;
}

// The cos and sin of row r's (of q or k, within its matrix) frequency at `pos`.
inline __global const float* rope_at(__global const float* rope, int pos, int head_size, int r) {
    return rope + (size_t)pos * head_size + 2 * ((r % head_size) / 2);
}

// Attention entry of a layer: q, k, v = (wq, wk, wv) @ rmsnorm(x), RoPE applied to q and k, and k, v
// stored in this layer's KV cache at `pos`. A unit of work is one (even, odd) pair of output rows of the
// stacked [wq; wk; wv], so the RoPE rotation happens in registers. `rope` is (seq_len, head_size/2, 2):
// cos, sin of every position and frequency, computed once on the host with run.c's formula.
//
// The row pairs of work unit `unit`, the input normalized with scale ss (and staged when staged_n > 0;
// when negative, the token kernel's, this unit stages it and ss is not used: row_pair).
UNIT_FUNCTION void attn_qkv_rope_unit(int unit, __global const float* x, __global const float* rms_weight, float ss,
                                      __global const weight_t* wq, __global const weight_t* wk, __global const weight_t* wv,
                                      __global const float* rope, __global float* q, __global float* key_cache,
                                      __global float* value_cache, int dim, int kv_dim, int head_size, int pos,
                                      __local float* staged, int staged_n, __local float* scratch) {
    ROW_SETUP(unit, (dim + 2 * kv_dim) / 2);
    int r = 2 * row;  // first row of the pair within its matrix
    const int part = qkv_part(&r, dim, kv_dim);
    __global const weight_t* w = part == 0 ? wq : part == 1 ? wk : wv;
    __global const float* cs = rope_at(rope, pos, head_size, r);
#ifdef FEW_GROUPS
    // The rotation's cos and sin, read before the dot products so that their wait overlaps the rows'.
    const float fcr = lane == 0 ? cs[0] : 0.0f, fci = lane == 0 ? cs[1] : 0.0f;
#endif
    const float2 pair =
        row_pair(WEIGHT_ROW(w, r, dim), WEIGHT_ROW(w, r + 1, dim), x, rms_weight, ss, staged, staged_n, dim, lane, scratch);
    if (!row_valid || lane != 0) return;
#ifndef FEW_GROUPS
    const float fcr = cs[0], fci = cs[1];
#endif
    store_qkv_pair(part, r, pair.x, pair.y, fcr, fci, q, key_cache, value_cache, kv_dim, pos);
}

#ifdef ROW_BLOCKS
// Units unit .. unit + 7 at once where their sixteen rows are of one matrix (partial_dot16), else one by one.
UNIT_FUNCTION void attn_qkv_rope_block(int unit, __global const float* x, __global const float* rms_weight, float ss,
                                       __global const weight_t* wq, __global const weight_t* wk,
                                       __global const weight_t* wv, __global const float* rope, __global float* q,
                                       __global float* key_cache, __global float* value_cache, int dim, int kv_dim,
                                       int head_size, int pos, __local float* staged, int staged_n,
                                       __local float* scratch) {
    int r = 2 * unit;
    const int part = qkv_part(&r, dim, kv_dim);
    if (r + 16 > (part == 0 ? dim : kv_dim)) {
        for (int u = unit; u < unit + 8; u++)
            attn_qkv_rope_unit(u, x, rms_weight, ss, wq, wk, wv, rope, q, key_cache, value_cache, dim, kv_dim,
                               head_size, pos, staged, staged_n, scratch);
        return;
    }
    __global const weight_t* w = part == 0 ? wq : part == 1 ? wk : wv;
    float v[16];
    vstore16(partial_dot16(WEIGHT_ROW(w, r, dim), WEIGHT_ROW(w, r + 8, dim), x, rms_weight, ss, dim), 0, v);
    for (int i = 0; i < 16; i += 2) {
        __global const float* cs = rope_at(rope, pos, head_size, r + i);
        store_qkv_pair(part, r + i, v[i], v[i + 1], cs[0], cs[1], q, key_cache, value_cache, kv_dim, pos);
    }
}
#endif

// A work-group's part of the step (its units; the first group writes the normalized input to xn): the
// per-op kernel's body, and the CPU families' token kernel's step (token_cpu.cl).
UNIT_FUNCTION void attn_qkv_rope_step(__global const float* x, __global const float* rms_weight,
                                      __global const weight_t* wq, __global const weight_t* wk,
                                      __global const weight_t* wv, __global const float* rope, __global float* q,
                                      __global float* key_cache, __global float* value_cache, __global float* xn,
                                      int dim, int kv_dim, int head_size, int pos, __local float* staged, int staged_n,
                                      __local float* scratch) {
    const float ss = rms_scale(x, dim, scratch);
    if (get_group_id(0) == 0) write_norm(xn, x, rms_weight, ss, dim);
    if (staged_n > 0) stage_input(staged, x, rms_weight, ss, dim);
#ifdef ROW_BLOCKS
    FOR_GROUP_ROW_RUNS(unit, end, (dim + 2 * kv_dim) / 2, 8) {
        const int step = row_run_step(unit, end, 8);
        if (step == 8)
            attn_qkv_rope_block(unit, x, rms_weight, ss, wq, wk, wv, rope, q, key_cache, value_cache, dim, kv_dim,
                                head_size, pos, staged, staged_n, scratch);
        else
            for (int u = unit; u < unit + step; u++)
                attn_qkv_rope_unit(u, x, rms_weight, ss, wq, wk, wv, rope, q, key_cache, value_cache, dim, kv_dim,
                                   head_size, pos, staged, staged_n, scratch);
    }
#else
    FOR_GROUP_UNITS(unit, (dim + 2 * kv_dim) / 2)
    attn_qkv_rope_unit(unit, x, rms_weight, ss, wq, wk, wv, rope, q, key_cache, value_cache, dim, kv_dim,
                       head_size, pos, staged, staged_n, scratch);
#endif
}

__kernel void attn_qkv_rope(__global const float* x, __global const float* rms_weight,
                            __global const weight_t* wq, __global const weight_t* wk, __global const weight_t* wv,
                            __global const float* rope, __global float* q, __global float* key_cache,
                            __global float* value_cache, __global float* xn, int dim, int kv_dim, int head_size,
                            int pos, __local float* staged, int staged_n) {
    __local float scratch[LOCAL];
    attn_qkv_rope_step(x, rms_weight, wq, wk, wv, rope, q, key_cache, value_cache, xn, dim, kv_dim, head_size, pos,
                       staged, staged_n, scratch);
}

// FFN entry of a layer: hb = silu(w1 @ rmsnorm(x)) * (w3 @ rmsnorm(x)), one row of each per unit. The
// rows of work unit `unit`, the input normalized with scale ss (and staged when staged_n > 0; when
// negative, the token kernel's, this unit stages it and ss is not used: row_pair).
UNIT_FUNCTION void ffn_gate_up_unit(int unit, __global const float* x, __global const float* rms_weight, float ss,
                                    __global const weight_t* w1, __global const weight_t* w3, __global float* hb, int dim,
                                    int hidden_dim, __local float* staged, int staged_n, __local float* scratch) {
    ROW_SETUP(unit, hidden_dim);
    const float2 gate_up =
        row_pair(WEIGHT_ROW(w1, row, dim), WEIGHT_ROW(w3, row, dim), x, rms_weight, ss, staged, staged_n, dim, lane, scratch);
    if (!row_valid || lane != 0) return;
    hb[row] = swiglu_of(gate_up.x, gate_up.y);
}

#ifdef ROW_BLOCKS
// Rows row .. row + 7 of w1 and of w3 at once (partial_dot16).
UNIT_FUNCTION void ffn_gate_up_block(int row, __global const float* x, __global const float* rms_weight, float ss,
                                     __global const weight_t* w1, __global const weight_t* w3, __global float* hb,
                                     int dim) {
    float v[16];
    vstore16(partial_dot16(WEIGHT_ROW(w1, row, dim), WEIGHT_ROW(w3, row, dim), x, rms_weight, ss, dim), 0, v);
    for (int i = 0; i < 8; i++) hb[row + i] = swiglu_of(v[i], v[i + 8]);
}
#endif

// A work-group's part of the step (as attn_qkv_rope_step).
UNIT_FUNCTION void ffn_gate_up_step(__global const float* x, __global const float* rms_weight,
                                    __global const weight_t* w1, __global const weight_t* w3, __global float* hb,
                                    __global float* xn, int dim, int hidden_dim, __local float* staged, int staged_n,
                                    __local float* scratch) {
    const float ss = rms_scale(x, dim, scratch);
    if (get_group_id(0) == 0) write_norm(xn, x, rms_weight, ss, dim);
    if (staged_n > 0) stage_input(staged, x, rms_weight, ss, dim);
#ifdef ROW_BLOCKS
    FOR_GROUP_ROW_RUNS(row, end, hidden_dim, 8) {
        const int step = row_run_step(row, end, 8);
        if (step == 8)
            ffn_gate_up_block(row, x, rms_weight, ss, w1, w3, hb, dim);
        else
            for (int u = row; u < row + step; u++)
                ffn_gate_up_unit(u, x, rms_weight, ss, w1, w3, hb, dim, hidden_dim, staged, staged_n, scratch);
    }
#else
    FOR_GROUP_UNITS(unit, hidden_dim)
    ffn_gate_up_unit(unit, x, rms_weight, ss, w1, w3, hb, dim, hidden_dim, staged, staged_n, scratch);
#endif
}

__kernel void ffn_gate_up(__global const float* x, __global const float* rms_weight, __global const weight_t* w1,
                          __global const weight_t* w3, __global float* hb, __global float* xn, int dim, int hidden_dim,
                          __local float* staged, int staged_n) {
    __local float scratch[LOCAL];
    ffn_gate_up_step(x, rms_weight, w1, w3, hb, xn, dim, hidden_dim, staged, staged_n, scratch);
}

// RMSNorm on its own, by one work-group: out = rmsnorm(x) * weight, run.c's rmsnorm.
__kernel void rmsnorm(__global const float* x, __global const float* weight, __global float* out, int n) {
    __local float scratch[LOCAL];
    write_norm(out, x, weight, rms_scale(x, n, scratch), n);
}

// Final RMSNorm and classifier: out[row_base + i] = w[i] . rmsnorm(x) for the `rows` rows of this block
// of the classifier (a large classifier is split into blocks that each fit one device allocation).
// With rms_weight NULL, x is already normalized (the rmsnorm kernel's output, which the CPU shapes run
// first: there a work-item owns a row, and recomputing the scale per row would double the classifier's
// arithmetic). Either way each product is w[j] * (weight[j] * (ss * x[j])), so the logits agree bit for bit.
// The rows of work unit `unit` of a classifier block, the input normalized with scale ss when rms_weight is
// given (and staged when staged_n > 0).
UNIT_FUNCTION void classifier_unit(int unit, __global const float* x, __global const float* rms_weight, float ss,
                                   __global const weight_t* w, __global float* logits, int dim, int rows, int row_base,
                                   __local float* staged, int staged_n, __local float* scratch) {
    ROW_SETUP(unit, rows);
    const float val =
        row_sum(row_dot(WEIGHT_ROW(w, row, dim), x, rms_weight, ss, staged, staged_n, dim, lane, scratch), scratch);
    if (row_valid && lane == 0) logits[row_base + row] = val;
}

// A work-group's part of a classifier block (as attn_qkv_rope_step).
UNIT_FUNCTION void classifier_step(__global const float* x, __global const float* rms_weight, __global const weight_t* w,
                                   __global float* logits, __global float* xn, int dim, int rows, int row_base,
                                   __local float* staged, int staged_n, __local float* scratch) {
#if SHAPE_FAMILY != SHAPE_GPU
    const float ss = rms_weight ? rms_scale(x, dim, scratch) : 0.0f;
#else
    // GPU shapes always normalize here; their rms_scale has barriers, which PoCL's compiler mishandles
    // under a branch, even a uniform one.
    const float ss = rms_scale(x, dim, scratch);
#endif
    if (rms_weight && get_group_id(0) == 0 && row_base == 0) write_norm(xn, x, rms_weight, ss, dim);
    if (staged_n > 0) stage_input(staged, x, rms_weight, ss, dim);
#ifdef ROW_PAIRS
    FOR_GROUP_ROW_RUNS(row, end, rows, 16) {
        const int step = row_run_step(row, end, 16);
#ifdef ROW_BLOCKS
        if (step == 16) {
            vstorew(partial_dot16(WEIGHT_ROW(w, row, dim), WEIGHT_ROW(w, row + 8, dim), x, rms_weight, ss, dim),
                    logits + row_base + row);
            continue;
        }
#endif
        if (step == 1) {
            classifier_unit(row, x, rms_weight, ss, w, logits, dim, rows, row_base, staged, staged_n, scratch);
            continue;
        }
        const float2 v = row_pair(WEIGHT_ROW(w, row, dim), WEIGHT_ROW(w, row + 1, dim), x, rms_weight, ss, staged,
                                  staged_n, dim, 0, scratch);
        logits[row_base + row] = v.x;
        logits[row_base + row + 1] = v.y;
    }
#else
    FOR_GROUP_UNITS(unit, rows)
    classifier_unit(unit, x, rms_weight, ss, w, logits, dim, rows, row_base, staged, staged_n, scratch);
#endif
}

__kernel void classifier(__global const float* x, __global const float* rms_weight, __global const weight_t* w,
                         __global float* logits, __global float* xn, int dim, int rows, int row_base,
                         __local float* staged, int staged_n) {
    __local float scratch[LOCAL];
    classifier_step(x, rms_weight, w, logits, xn, dim, rows, row_base, staged, staged_n, scratch);
}
