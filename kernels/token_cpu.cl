// The CPU families' token kernel (token.cl has the grid barrier): the per-op kernels' steps in one launch
// of one work-group of one work-item per CPU the process may run on (the host's choice, at most one per
// compute unit), each taking its share of every step's rows as it does in its own kernel, with a grid
// barrier between steps. Each step is the per-op kernel's body, so the logits are the per-op schedule's
// bit for bit; what goes is PoCL's time between commands.
#if defined(TOKEN_KERNEL) && SHAPE_FAMILY != SHAPE_GPU
#if LOCAL != 1
#error "the CPU families' token kernel runs work-groups of one work-item"
#endif

// The staged input's count (KernelSet::staged_count): Q8_0's rows read only a staged input, the float
// formats' read x in place.
#ifdef QUANTIZED_WEIGHTS
#define STAGED_N(n) (n)
#else
#define STAGED_N(n) 0
#endif

__kernel void forward_token(FORWARD_TOKEN_PARAMETERS) {
    __local float scratch[LOCAL];
    __local int index_scratch[LOCAL];
    __local int passed, last;
    uint barriers = 0;
    for (int pos = first; pos < first + count; pos++) {
        for (int l = 0; l < N_LAYERS; l++) {
            __global float* keys = key_cache + (size_t)l * stride_cache;
            __global float* values = value_cache + (size_t)l * stride_cache;
            attn_qkv_rope_step(x, rms_att + (size_t)l * STRIDE_NORM, wq + (size_t)l * STRIDE_ATTN,
                               wk + (size_t)l * STRIDE_KV, wv + (size_t)l * STRIDE_KV, rope, q, keys, values, xn, DIM,
                               KV_DIM, HEAD_SIZE, pos, staged, STAGED_N(DIM), scratch);
            GRID_BARRIER();
            FOR_GROUP_UNITS(h, N_HEADS)
            attention_head(h, q, keys, values, att, xb, N_HEADS, HEAD_SIZE, KV_DIM, KV_MUL, seq_len, pos);
            GRID_BARRIER();
            matvec_residual_step(wo + (size_t)l * STRIDE_ATTN, xb, x, DIM, DIM, staged, STAGED_N(DIM), scratch);
            GRID_BARRIER();
            ffn_gate_up_step(x, rms_ffn + (size_t)l * STRIDE_NORM, w1 + (size_t)l * STRIDE_FFN,
                             w3 + (size_t)l * STRIDE_FFN, hb, xn, DIM, HIDDEN_DIM, staged, STAGED_N(DIM), scratch);
            GRID_BARRIER();
            matvec_residual_step(w2 + (size_t)l * STRIDE_FFN, hb, x, HIDDEN_DIM, DIM, staged, STAGED_N(HIDDEN_DIM),
                                 scratch);
            GRID_BARRIER();
        }
        // The final norm once, as the per-op schedule's rmsnorm kernel: the classifier's rows read xn.
        if (get_group_id(0) == 0) write_norm(xn, x, rms_final, rms_scale(x, DIM, scratch), DIM);
        GRID_BARRIER();
        classifier_step(xn, 0, wcls, logits, xn, DIM, VOCAB, 0, staged, STAGED_N(DIM), scratch);
        if (!greedy) return;
        // Greedy decoding: each work-group's argmax over the logits it wrote (the classifier's share of the
        // rows is argmax_share_unit's) goes to argmax_partial.
        argmax_share_unit(get_group_id(0), get_num_groups(0), logits, VOCAB, argmax_partial, scratch, index_scratch);
        NEXT_POSITION();
    }
}

#endif
