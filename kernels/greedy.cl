// Greedy decoding on the device: the next token is the argmax of the logits (run.c's sampler at
// temperature 0) and the next position's input is that token's row of the embedding table, so a position
// needs nothing from the host and the host can enqueue positions ahead of the ones it reads
// (device_forward.hpp, "greedy decoding").

// The mark for a non-finite logit: KernelSet passes kNonFiniteToken (kernel_set.hpp); builds without one
// (a device's whole source, tests) take its value here.
#ifndef NON_FINITE_TOKEN
#define NON_FINITE_TOKEN (-2)
#endif

// Whether candidate i (value v) is chosen over candidate j (value w) by run.c's argmax, which starts from
// index 0 and moves only to a strictly larger value: the first largest wins. -1 is no candidate;
// NON_FINITE_TOKEN (a logit that is NaN or infinite: the host ends the run there, as on its own logits)
// wins over everything. As an order on (value, index) pairs it does not depend on how the candidates are
// split and combined.
inline int argmax_before(float v, int i, float w, int j) {
    if (j == NON_FINITE_TOKEN) return 0;
    if (i == NON_FINITE_TOKEN) return 1;
    if (i < 0) return 0;
    if (j < 0) return 1;
    return v > w || (v == w && i < j);
}

// Makes candidate (v, i) the work-item's best (*best_v, *best_i) if argmax_before says so, a non-finite
// logit as NON_FINITE_TOKEN.
inline void argmax_keep(float v, int i, __private float* best_v, __private int* best_i) {
    if (i >= 0 && !isfinite(v)) i = NON_FINITE_TOKEN;
    if (argmax_before(v, i, *best_v, *best_i)) {
        *best_v = v;
        *best_i = i;
    }
}

// The work-group's choice among its work-items' candidates (best_i -1: none). Every work-item must call it
// (local reductions); all of them get the winner, -1 when no candidate qualifies.
inline int argmax_reduce(float best_v, int best_i, __local float* value_scratch, __local int* index_scratch) {
    const int lid = get_local_id(0);
    value_scratch[lid] = best_v;
    index_scratch[lid] = best_i;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = LOCAL / 2; s > 0; s >>= 1) {
        if (lid < s && argmax_before(value_scratch[lid + s], index_scratch[lid + s], value_scratch[lid],
                                     index_scratch[lid])) {
            value_scratch[lid] = value_scratch[lid + s];
            index_scratch[lid] = index_scratch[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int winner = index_scratch[0];
    barrier(CLK_LOCAL_MEM_FENCE);  // the scratch is reused by the next call
    return winner;
}

// The work-group's choice among candidates [first, first + count): candidate k is index candidates[k]
// of `values` (-1: none), or index k itself when candidates is null. Every work-item must call it (local
// reductions); all of them get the winner, -1 when no candidate qualifies.
UNIT_FUNCTION int argmax_unit(__global const float* values, __global const int* candidates, int first, int count,
                              __local float* value_scratch, __local int* index_scratch) {
    float best_v = 0.0f;
    int best_i = -1;
    for (int k = first + get_local_id(0); k < first + count; k += LOCAL) {
        const int i = candidates ? candidates[k] : k;
        argmax_keep(i >= 0 ? values[i] : 0.0f, i, &best_v, &best_i);
    }
    return argmax_reduce(best_v, best_i, value_scratch, index_scratch);
}

// Work-group `g` of `groups`: the index of the largest of its share of the `count` logits goes to
// partial[g] (NON_FINITE_TOKEN where the share holds a NaN or an infinity, -1 where it is empty).
UNIT_FUNCTION void argmax_share_unit(int g, int groups, __global const float* logits, int count,
                                     __global int* partial, __local float* value_scratch, __local int* index_scratch) {
    const int per_group = (count + groups - 1) / groups, first = g * per_group;
    const int share = max(0, min(per_group, count - first));
#if SHAPE_FAMILY != SHAPE_GPU
    // CPU families: a work-item takes a run of the share, 16 logits at a time, each lane keeping its best as
    // argmax_keep does (a lane's later candidates have larger indices, so a tie never moves it) and noting
    // a non-finite logit, then the lanes' bests in turn.
    const int per_item = (share + LOCAL - 1) / LOCAL, begin = first + get_local_id(0) * per_item;
    const int end = min(first + share, begin + per_item);
    floatw lane_v = (floatw)(0.0f);
    int16 lane_i = (int16)(-1), non_finite = (int16)(0);
    int k = begin;
    for (; k + 16 <= end; k += 16) {
        const floatw v = vloadw(logits + k);
        const int16 i = (int16)(k) + (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        non_finite |= !isfinite(v);
        const int16 take = lane_i < 0 | v > lane_v;
        lane_v = select(lane_v, v, take);
        lane_i = select(lane_i, i, take);
    }
    float best_v = 0.0f;
    int best_i = any(non_finite) ? NON_FINITE_TOKEN : -1;
    for (int l = 0; l < 16; l++) argmax_keep(((float*)&lane_v)[l], ((int*)&lane_i)[l], &best_v, &best_i);
    for (; k < end; k++) argmax_keep(logits[k], k, &best_v, &best_i);
    const int winner = argmax_reduce(best_v, best_i, value_scratch, index_scratch);
#else
    const int winner = argmax_unit(logits, 0, first, share, value_scratch, index_scratch);
#endif
    if (get_local_id(0) == 0) partial[g] = winner;
}

// One work-group: with `choose`, the next token (tokens[pos + 1]) is the largest of the `groups` partial
// winners; without, it is the one already there (the prompt's). Either way its embedding row becomes the
// residual stream x, the next position's input.
UNIT_FUNCTION void next_token_unit(__global const float* logits, __global const int* partial, int groups, int choose,
                                   __global int* tokens, int pos, __global const weight_t* table, __global float* x,
                                   int dim, __local float* value_scratch, __local int* index_scratch) {
    // Every work-item reaches the reduction's barriers whatever `choose` says (no candidates without it):
    // PoCL's compiler mishandles barriers under a branch, even a uniform one. (The token kernel, which
    // calls this under uniform branches, never runs on PoCL's CPU device.)
    const int winner = argmax_unit(logits, partial, 0, choose ? groups : 0, value_scratch, index_scratch);
    if (get_local_id(0) == 0) {
        if (choose) tokens[pos + 1] = winner;
        index_scratch[0] = choose ? winner : tokens[pos + 1];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int next = index_scratch[0];
    // No token (no candidate, a non-finite logit, or a forced token of -1): nothing to copy. (A token kernel
    // that gave up never gets here: the work-group that would is the last to finish, and one that gave up
    // never finishes.)
    if (next < 0) return;
    for (int i = get_local_id(0); i < dim; i += LOCAL) x[i] = ROW_ELEMENT(WEIGHT_ROW(table, next, dim), i, dim);
}

// The two steps as kernels of their own (the per-op schedule): `argmax` over many work-groups, then
// `argmax_embed` as one.
__kernel void argmax(__global const float* logits, int count, __global int* partial) {
    __local float value_scratch[LOCAL];
    __local int index_scratch[LOCAL];
    argmax_share_unit(get_group_id(0), get_num_groups(0), logits, count, partial, value_scratch, index_scratch);
}

__kernel void argmax_embed(__global const float* logits, __global const int* partial, int groups, int choose,
                           __global int* tokens, int pos, __global const weight_t* table, __global float* x, int dim) {
    __local float value_scratch[LOCAL];
    __local int index_scratch[LOCAL];
    next_token_unit(logits, partial, groups, choose, tokens, pos, table, x, dim, value_scratch, index_scratch);
}
