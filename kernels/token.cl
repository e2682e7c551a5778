// The token kernel: a whole token's forward pass (every layer's five steps, and a sixth where w2's input
// is quantized once: QUANTIZE_W2_ONCE; then the final RMSNorm and the classifier) in one launch, where
// small models are otherwise bound by the cost of their launches: on a GPU each costs host and device
// time comparable to a small model's step, and PoCL pays several microseconds between two commands,
// where its work-groups meet at a grid barrier in a fraction of one.
// In greedy decoding one launch runs several positions in turn, each picking the next one's token, so
// that no position waits for a launch. Built only when the host asks for it (TOKEN_KERNEL): it needs
// OpenCL C 2.0's memory scopes. This file holds the grid barrier and the GPU family's kernel;
// token_cpu.cl the CPU families'.
//
// The launch has no more work-groups than can run at once (the host's choice). Each step's work units
// (the per-op kernels' work-groups: row blocks, (head, chunk) pairs) are dealt out to the work-groups,
// with a grid-wide barrier between steps.
//
// The model's shape is compiled in: DIM, KV_DIM, HIDDEN_DIM, N_LAYERS, N_HEADS, KV_MUL, VOCAB, and the
// distance in elements (the matrices' weight_t, the norms' floats) between one layer's tensor and the
// next in the stacked weight buffers (STRIDE_NORM, STRIDE_ATTN for wq and wo, STRIDE_KV for wk and wv,
// STRIDE_FFN for w1, w2, w3). The positions the buffers hold (SEQ_LEN) and the distance between layers in
// the KV cache (STRIDE_CACHE) are compiled in for GPUs; the CPU families take them as arguments
// (seq_len, stride_cache), since they follow the run's length and PoCL takes seconds to build a program.
#ifdef TOKEN_KERNEL
#ifndef DEVICE_FENCES
#error "the token kernel's grid barriers need DEVICE_FENCES (grid_sync.cl)"
#endif

#define HEAD_SIZE (DIM / N_HEADS)

// forward_token's parameters, the same for every family (the host binds them by name: kernel_args.cpp); a
// family uses those it needs.
#define FORWARD_TOKEN_PARAMETERS                                                                                   \
    __global float* x, __global const float* rms_att, __global const weight_t* wq, __global const weight_t* wk,    \
        __global const weight_t* wv, __global const weight_t* wo, __global const float* rms_ffn,                   \
        __global const weight_t* w1, __global const weight_t* w2, __global const weight_t* w3,                     \
        __global const float* rope, __global float* key_cache, __global float* value_cache, __global float* q,     \
        __global float* xb, __global float* hb, __global float* att, __global float* xn, __global float* xq,        \
        __global float* att_partial, volatile __global uint* att_arrivals, __global const float* rms_final,        \
        __global const weight_t* wcls, __global float* logits, __global int* tokens, __global int* argmax_partial, \
        __global const int* chunk_lens, int first, int count, int greedy, int chosen_from,                         \
        volatile __global uint* sync, uint sync_base, uint spin_limit, __local float* staged, int seq_len,         \
        int stride_cache

// sync[0] counts arrivals and only ever grows (wrapping at 2^32): the launch's barrier k is passed once it
// reaches base + k * groups, base being the count the host expects at the launch's start. A work-group
// that polls spin_limit times gives up and sets sync[1]: the launch had work-groups that never ran, and
// every other work-group then gives up too instead of hanging. Returns whether the barrier was passed;
// if so, every work-group's writes before it are visible to every work-group after it: the arrival
// releases the work-group's writes (the barrier before it orders them first) and the fence after the
// polls acquires the others' (rather than a fence before a plain arrival, or an acquire in every poll).
// The count is a uint the host zeroes, read here as the atomic it is to the kernel. (sync[2] is greedy
// decoding's count of work-groups done with the classifier: last_to_arrive.)
inline int grid_barrier(volatile __global uint* sync, uint target, uint spin_limit, __local int* passed) {
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        volatile __global atomic_uint* count = (volatile __global atomic_uint*)&sync[0];
        atomic_fetch_add_explicit(count, 1u, memory_order_release, memory_scope_device);
        for (uint polls = 0;
             (int)(atomic_load_explicit(count, memory_order_relaxed, memory_scope_device) - target) < 0 &&
             sync[1] == 0;)
            if (++polls == spin_limit) sync[1] = 1;
        DEVICE_FENCE();
        *passed = sync[1] == 0;
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    return *passed;
}

// Ends the kernel when a grid barrier was given up, marking the logits (one float past the vocabulary)
// so that the host, which reads them anyway, learns it without another command; in greedy decoding the
// host reads the next token instead, so that becomes -1.
#define GRID_BARRIER()                                                                       \
    if (!grid_barrier(sync, sync_base + ++barriers * get_num_groups(0), spin_limit, &passed)) { \
        if (get_local_id(0) == 0) logits[VOCAB] = 1.0f;                                     \
        if (get_local_id(0) == 0 && greedy) tokens[pos + 1] = -1;                         \
        return;                                                                              \
    }

// Greedy decoding's end of a position (greedy.cl, with wcls the embedding table), each work-group's choice
// in argmax_partial: the last work-group to arrive (so every one is done with x) picks the next token among
// them, or takes the sequence's own below chosen_from, and puts its embedding in x, which the next position
// reads after a grid barrier. A work-group that gave up never arrives, and the token it marked -1 stays.
#define NEXT_POSITION()                                                                                          \
    if (last_to_arrive(&sync[2], get_num_groups(0), &last))                                                      \
        next_token_unit(logits, argmax_partial, get_num_groups(0), pos + 1 >= chosen_from, tokens, pos, wcls, x, \
                        DIM, scratch, index_scratch);                                                            \
    if (pos + 1 < first + count) GRID_BARRIER()

#if SHAPE_FAMILY == SHAPE_GPU
// The units of one step, dealt out to the launch's work-groups in turn.
#define FOR_UNITS(u, count) for (int u = get_group_id(0); u < (count); u += get_num_groups(0))

// A work-group stages a step's input in local memory once and reuses it for every unit it takes.
//
// rmsnorm(x) * weight staged in local memory (stage_input's values with rms_scale's scale), x and the
// weights read together once: rms_scale and then stage_input would wait on memory twice. Q8_0 with warp
// shuffles loads them as the words stage_input quantizes (a word a work-item in turn), forms the sum of
// squares from those, and normalizes and quantizes each word where it lies; without shuffles stage_input
// reads them again, from the cache. The other formats load floats, and sum in rms_scale's order.
#if defined(QUANTIZED_WEIGHTS) && defined(WORD_SCALES)
typedef float4 norm_t;
#define NORM_ELEMENTS (DIM / 4)
#define NORM_LOAD(p, i) vload4(i, p)
#define SQUARES(v) dot4(v, v)
#else
typedef float norm_t;
#define NORM_ELEMENTS DIM
#define NORM_LOAD(p, i) ((p)[i])
#define SQUARES(v) ((v) * (v))
#endif
#define NORM_LOADS ((NORM_ELEMENTS + LOCAL - 1) / LOCAL)
inline void stage_normed(__local float* staged, __global const float* x, __global const float* weight,
                          __local float* scratch) {
    norm_t xv[NORM_LOADS], wv[NORM_LOADS];
#pragma unroll
    for (int k = 0; k < NORM_LOADS; k++) {
        const int i = get_local_id(0) + k * LOCAL;
        xv[k] = i < NORM_ELEMENTS ? NORM_LOAD(x, i) : (norm_t)(0.0f);
        wv[k] = i < NORM_ELEMENTS ? NORM_LOAD(weight, i) : (norm_t)(0.0f);
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < NORM_LOADS; k++) ss += SQUARES(xv[k]);  // (the padding adds zeros)
    ss = rms_from_sum(group_reduce(ss, 0, scratch), DIM);
#if defined(QUANTIZED_WEIGHTS) && defined(WORD_SCALES)
#pragma unroll
    for (int k = 0; k < NORM_LOADS; k++) stage_word(staged, wv[k] * (ss * xv[k]), DIM, get_local_id(0) + k * LOCAL);
    barrier(CLK_LOCAL_MEM_FENCE);  // the rows read `staged`
#elif defined(QUANTIZED_WEIGHTS)
    stage_input(staged, x, weight, ss, DIM);
#else
#pragma unroll
    for (int k = 0; k < NORM_LOADS; k++) {
        const int j = get_local_id(0) + k * LOCAL;
        if (j < DIM) staged[j] = wv[k] * (ss * xv[k]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // the rows read `staged`
#endif
}

#if defined(QUANTIZE_W2_ONCE) || defined(QUANTIZE_WO_INPUT)
#if !defined(QUANTIZED_WEIGHTS) || !defined(WORD_SCALES)
#error "QUANTIZE_W2_ONCE and QUANTIZE_WO_INPUT are Q8_0's, with warp shuffles (dot_quantized.cl's word_scale)"
#endif
// A step's input quantized once, into xq (laid out as `staged` for its n values), and copied from there by
// every work-group of the step instead of each quantizing it. A word a work-item: word base + lid for each
// base from `first` below `end` by `step` (group-aligned, so that a group's words fall in one warp), every
// work-item taking every pass (word_scale's shuffles): the same bits as stage_input's.
inline void quantize_words(__global float* xq, __global const float* in, int n, int first, int end, int step) {
    __global char4* values = (__global char4*)(xq + n / GROUP_SIZE);
    for (int base = first; base < end; base += step) {
        const int i = base + get_local_id(0);
        const float4 v = i < end ? vload4(i, in) : (float4)(0.0f);
        const float scale = word_scale(v);
        if (i >= end) continue;
        const int g = i / (GROUP_SIZE / 4);
        if (i % (GROUP_SIZE / 4) == 0) xq[g] = q8_kept(scale);
        values[staged_int(n / GROUP_SIZE, g, i % (GROUP_SIZE / 4))] = quantized4(v, q8_step(scale));
    }
}
// xq into `staged`: the scales, then the values, a word (four bytes) at a time.
inline void copy_quantized_input(__local float* staged, __global const float* xq, int n) {
    const int words = n / GROUP_SIZE + n / 4;
    for (int i = get_local_id(0); i < words; i += LOCAL) ((__local uint*)staged)[i] = ((__global const uint*)xq)[i];
    barrier(CLK_LOCAL_MEM_FENCE);  // the rows read `staged`
}
#endif
// w2's input where hb is long, between two grid barriers: its staging would take a work-group longer than
// that barrier (the host's choice: TokenKernel::create). The launch's work-items take its words in turn.
#ifdef QUANTIZE_W2_ONCE
#define W2_INPUT xq
#else
#define W2_INPUT hb
#endif
// wo's input, head by head, by the work-group that completes the head's output (its only unit, or the last
// of its chunks), so that no barrier is added: every head's words are whole groups (the host's condition).
#ifdef QUANTIZE_WO_INPUT
inline void quantize_head_output(__global float* xq, __global const float* xb, int h) {
    barrier(CLK_GLOBAL_MEM_FENCE);  // the head's output, written by the work-group's own work-items
    quantize_words(xq, xb, DIM, h * (HEAD_SIZE / 4), (h + 1) * (HEAD_SIZE / 4), LOCAL);
}
#define WO_INPUT xq
#else
#define WO_INPUT xb
#endif

// dot.cl's: the step's input staged by the work-group's first unit of the step, once its first weights
// are on their way. A work-group with no unit in the step stages nothing.
void stage_step_input(__local float* staged, __global const float* x, __global const float* weight, int n,
                      __local float* scratch) {
    if (weight) stage_normed(staged, x, weight, scratch);  // (x is the residual stream: n == DIM)
    // (x is xq; the host asks for either only where DIM != HIDDEN_DIM, so n tells w2's input from wo's.)
#ifdef QUANTIZE_W2_ONCE
    else if (n == HIDDEN_DIM) copy_quantized_input(staged, x, n);
#endif
#ifdef QUANTIZE_WO_INPUT
    else if (n == DIM) copy_quantized_input(staged, x, n);
#endif
    else stage_input(staged, x, 0, 0.0f, n);
}
// staged_n for unit u: negative for the work-group's first unit of the step, which stages the input.
#define STAGED(u, n) ((u) < get_num_groups(0) ? -(n) : (n))

// The classifier two row blocks at a time: unit u is blocks 2u and 2u + 1, each work-item's rows in the
// two loaded together (row_pair). Its thousands of blocks are the one step where a work-group takes many
// units in turn, each a wait on memory, so halving their number pays.
// The work-item's best logit so far (greedy.cl's order) is kept in best_v, best_i.
//
// Unit `unit`'s logits (v: its first block's row, its second's) written and kept in the best so far.
inline void keep_classifier_pair(int unit, float2 v, __global float* logits, __private float* best_v,
                                 __private int* best_i) {
    ROW_SETUP(2 * unit, VOCAB);
    const int second = row_unclamped + ROWS_PER_GROUP;
    if (lane != 0) return;
    if (row_valid) {
        logits[row] = v.x;
        argmax_keep(v.x, row, best_v, best_i);
    }
    if (second < VOCAB) {
        logits[second] = v.y;
        argmax_keep(v.y, second, best_v, best_i);
    }
}
inline void classifier_pair_unit(int unit, __global const weight_t* wcls, __global const float* x,
                                 __global const float* rms_final, __global float* logits, __local float* staged,
                                 __local float* scratch, __private float* best_v, __private int* best_i) {
    ROW_SETUP(2 * unit, VOCAB);
    const int second = min(row_unclamped + ROWS_PER_GROUP, VOCAB - 1);
    const float2 v = row_pair(WEIGHT_ROW(wcls, row, DIM), WEIGHT_ROW(wcls, second, DIM), x, rms_final, 0.0f, staged,
                              STAGED(unit, DIM), DIM, lane, scratch);
    keep_classifier_pair(unit, v, logits, best_v, best_i);
}

// When a classifier row fits one batch of a work-item's loads and two units' rows (four batches) leave room
// in its registers (stories15M, stories260K; not stories110M's batches of 32), the classifier is
// pipelined: a work-group issues its next unit's loads before it reduces the current one's, so that each
// wait on memory overlaps the reduction before it instead of following it. (Float weights: its loads are
// dot.cl's.)
#if defined(FLOAT_WEIGHTS) && DIM / WEIGHT_SPAN <= DOT_BATCH * ROW_THREADS && DOT_BATCH <= 16
#define CLASSIFIER_PIPELINED
// This work-item's rows of classifier unit `unit` (classifier_pair_unit's) loaded into a and b.
inline void load_classifier_pair(int unit, __global const weight_t* wcls, __private weight_span_t* a,
                                 __private weight_span_t* b) {
    ROW_SETUP(2 * unit, VOCAB);
    const int second = min(row_unclamped + ROWS_PER_GROUP, VOCAB - 1);
    load_first_batch(a, WEIGHT_ROW(wcls, row, DIM), DIM / WEIGHT_SPAN, lane);
    load_first_batch(b, WEIGHT_ROW(wcls, second, DIM), DIM / WEIGHT_SPAN, lane);
}
#endif

// Q4_0 on NVIDIA (TOKEN_PREFETCH): a work-group prefetches its next unit's rows into L2 (PTX's prefetch:
// no registers, no wait) before it computes the current one, and a step's first unit before the grid
// barrier ahead of it, so that its next weights stream from memory while it computes or waits. PREFETCH(f)
// is f there, nothing elsewhere.
#if defined(WEIGHT_Q4_0) && defined(INLINE_PTX)
#define TOKEN_PREFETCH
#define PREFETCH(call) call
inline void prefetch_l2(__global const uchar* p) { __asm__ volatile("prefetch.global.L2 [%0];" : : "l"(p)); }
// The lane's share of the 128-byte lines of `bytes` bytes from w (a warp's rows).
inline void prefetch_rows(__global const weight_t* w, int bytes, int lane) {
    for (int off = lane * 128; off < bytes; off += ROW_THREADS * 128) prefetch_l2(w + off);
    if (lane == 0) prefetch_l2(w + bytes - 1);
}
// Unit `unit`'s rows, where the step has it, of the steps that read weights (as their unit functions
// find them).
inline void prefetch_qkv(int unit, __global const weight_t* wq, __global const weight_t* wk, __global const weight_t* wv) {
    if (unit >= UNITS((DIM + 2 * KV_DIM) / 2)) return;
    ROW_SETUP(unit, (DIM + 2 * KV_DIM) / 2);
    int r = 2 * row;
    __global const weight_t* w = wq;
    if (r >= DIM + KV_DIM) { w = wv; r -= DIM + KV_DIM; }
    else if (r >= DIM) { w = wk; r -= DIM; }
    prefetch_rows(WEIGHT_ROW(w, r, DIM), 2 * Q4_ROW_BYTES(DIM), lane);
}
inline void prefetch_matvec(int unit, __global const weight_t* w, int n, int rows) {
    if (unit >= UNITS(rows)) return;
    ROW_SETUP(unit, rows);
    prefetch_rows(WEIGHT_ROW(w, row, n), Q4_ROW_BYTES(n), lane);
}
inline void prefetch_ffn(int unit, __global const weight_t* w1, __global const weight_t* w3) {
    if (unit >= UNITS(HIDDEN_DIM)) return;
    ROW_SETUP(unit, HIDDEN_DIM);
    prefetch_rows(WEIGHT_ROW(w1, row, DIM), Q4_ROW_BYTES(DIM), lane);
    prefetch_rows(WEIGHT_ROW(w3, row, DIM), Q4_ROW_BYTES(DIM), lane);
}
inline void prefetch_classifier(int unit, __global const weight_t* wcls) {
    if (unit >= (UNITS(VOCAB) + 1) / 2) return;
    ROW_SETUP(2 * unit, VOCAB);
    const int second = min(row_unclamped + ROWS_PER_GROUP, VOCAB - 1);
    prefetch_rows(WEIGHT_ROW(wcls, row, DIM), Q4_ROW_BYTES(DIM), lane);
    prefetch_rows(WEIGHT_ROW(wcls, second, DIM), Q4_ROW_BYTES(DIM), lane);
}
#else
#define PREFETCH(call)
#endif

__kernel void forward_token(FORWARD_TOKEN_PARAMETERS) {
    __local float scratch[2 * LOCAL];  // row_pair's (FEW_GROUPS)
    __local float4 partial[LOCAL];
    __local int index_scratch[LOCAL];
    // Attention's scores (attention.cl): no chunk is longer than the context.
    __local float scores[SEQ_LEN < SCORE_CAPACITY ? SEQ_LEN : SCORE_CAPACITY];
    __local int passed, last;
    uint barriers = 0;
    for (int pos = first; pos < first + count; pos++) {
        const int chunk_len = chunk_lens[pos];
        const int chunks = (pos + chunk_len) / chunk_len;  // as the host counts them (attention_chunk_count)
        for (int l = 0; l < N_LAYERS; l++) {
            __global float* keys = key_cache + (size_t)l * STRIDE_CACHE;
            __global float* values = value_cache + (size_t)l * STRIDE_CACHE;
            __global const float* norm = rms_att + (size_t)l * STRIDE_NORM;
            // (A step's units stage its input themselves, STAGED: its RMSNorm's scale is not needed.)
            FOR_UNITS(u, UNITS((DIM + 2 * KV_DIM) / 2)) {
                PREFETCH(prefetch_qkv(u + get_num_groups(0), wq + (size_t)l * STRIDE_ATTN, wk + (size_t)l * STRIDE_KV,
                                      wv + (size_t)l * STRIDE_KV));
                attn_qkv_rope_unit(u, x, norm, 0.0f, wq + (size_t)l * STRIDE_ATTN, wk + (size_t)l * STRIDE_KV,
                                   wv + (size_t)l * STRIDE_KV, rope, q, keys, values, DIM, KV_DIM, HEAD_SIZE, pos,
                                   staged, STAGED(u, DIM), scratch);
            }
            PREFETCH(prefetch_matvec(get_group_id(0), wo + (size_t)l * STRIDE_ATTN, DIM, DIM));
            GRID_BARRIER();
            FOR_UNITS(u, N_HEADS * chunks) {
                attention_unit(u, q, keys, values, 0, xb, att_partial, att_arrivals, HEAD_SIZE, KV_DIM, KV_MUL,
                               SEQ_LEN, pos, chunk_len, scratch, partial, scores, &last);
#ifdef QUANTIZE_WO_INPUT
                if (chunks == 1 || last) quantize_head_output(xq, xb, u / chunks);  // (last: uniform)
#endif
            }
            GRID_BARRIER();
            FOR_UNITS(u, UNITS(DIM)) {
                PREFETCH(prefetch_matvec(u + get_num_groups(0), wo + (size_t)l * STRIDE_ATTN, DIM, DIM));
                matvec_residual_unit(u, wo + (size_t)l * STRIDE_ATTN, WO_INPUT, x, DIM, DIM, staged, STAGED(u, DIM),
                                     scratch);
            }
            PREFETCH(prefetch_ffn(get_group_id(0), w1 + (size_t)l * STRIDE_FFN, w3 + (size_t)l * STRIDE_FFN));
            GRID_BARRIER();
            norm = rms_ffn + (size_t)l * STRIDE_NORM;
            FOR_UNITS(u, UNITS(HIDDEN_DIM)) {
                PREFETCH(prefetch_ffn(u + get_num_groups(0), w1 + (size_t)l * STRIDE_FFN, w3 + (size_t)l * STRIDE_FFN));
                ffn_gate_up_unit(u, x, norm, 0.0f, w1 + (size_t)l * STRIDE_FFN, w3 + (size_t)l * STRIDE_FFN, hb, DIM,
                                 HIDDEN_DIM, staged, STAGED(u, DIM), scratch);
            }
            PREFETCH(prefetch_matvec(get_group_id(0), w2 + (size_t)l * STRIDE_FFN, HIDDEN_DIM, DIM));
            GRID_BARRIER();
#ifdef QUANTIZE_W2_ONCE
            quantize_words(xq, hb, HIDDEN_DIM, get_group_id(0) * LOCAL, HIDDEN_DIM / 4, LOCAL * get_num_groups(0));
            GRID_BARRIER();
#endif
            FOR_UNITS(u, UNITS(DIM)) {
                PREFETCH(prefetch_matvec(u + get_num_groups(0), w2 + (size_t)l * STRIDE_FFN, HIDDEN_DIM, DIM));
                matvec_residual_unit(u, w2 + (size_t)l * STRIDE_FFN, W2_INPUT, x, HIDDEN_DIM, DIM, staged,
                                     STAGED(u, HIDDEN_DIM), scratch);
            }
            if (l + 1 < N_LAYERS) {
                PREFETCH(prefetch_qkv(get_group_id(0), wq + (size_t)(l + 1) * STRIDE_ATTN,
                                      wk + (size_t)(l + 1) * STRIDE_KV, wv + (size_t)(l + 1) * STRIDE_KV));
            } else {
                PREFETCH(prefetch_classifier(get_group_id(0), wcls));
            }
            GRID_BARRIER();
        }
        float best_v = 0.0f;  // this work-item's best logit (greedy.cl), -1: none yet
        int best_i = -1;
#ifdef CLASSIFIER_PIPELINED
        const int pairs = (UNITS(VOCAB) + 1) / 2;
        if (get_group_id(0) < pairs) {  // (uniform in the work-group: the barriers below)
            weight_span_t a[DOT_BATCH], b[DOT_BATCH];
            load_classifier_pair(get_group_id(0), wcls, a, b);
            stage_step_input(staged, x, rms_final, DIM, scratch);
            const int lane = get_local_id(0) % ROW_THREADS;
            FOR_UNITS(u, pairs) {
                weight_span_t next_a[DOT_BATCH], next_b[DOT_BATCH];  // the next unit's, or this one's again at the end
                load_classifier_pair(min(u + (int)get_num_groups(0), pairs - 1), wcls, next_a, next_b);
                const float2 v = (float2)(first_batch_dot(a, staged, DIM / WEIGHT_SPAN, lane),
                                          first_batch_dot(b, staged, DIM / WEIGHT_SPAN, lane));
                keep_classifier_pair(u, row_sum2(v, scratch), logits, &best_v, &best_i);
#pragma unroll
                for (int k = 0; k < DOT_BATCH; k++) {
                    a[k] = next_a[k];
                    b[k] = next_b[k];
                }
            }
        }
#else
        FOR_UNITS(u, (UNITS(VOCAB) + 1) / 2) {
            PREFETCH(prefetch_classifier(u + get_num_groups(0), wcls));
            classifier_pair_unit(u, wcls, x, rms_final, logits, staged, scratch, &best_v, &best_i);
        }
#endif
        if (!greedy) return;
        // Greedy decoding: each work-group's best logit goes to argmax_partial.
        const int winner = argmax_reduce(best_v, best_i, scratch, index_scratch);
        if (get_local_id(0) == 0) argmax_partial[get_group_id(0)] = winner;
        NEXT_POSITION();
    }
}

#endif
#endif
