// GPU shapes: work-items that share one position's score (see below; docs/benchmarks.md).
#define KEY_SLICES 4

// Grouped-query attention of one position over the cached positions 0..pos of one layer. Query head h
// reads KV head h / kv_mul. `att` is scratch of n_heads x seq_len scores where the scores do not stay in
// local memory (CPU shapes, and GPU shapes built without device fences: SCORE below).
//
// GPU shapes built with device fences (grid_sync.cl) may split a head's positions into chunks of chunk_len
// (flash-decoding): one work-group per (head, chunk), so that a long context keeps every compute unit
// reading the cache rather than one work-group per head. With one chunk (chunk_len > pos) the group
// writes the head's output itself; with several, each writes its chunk's maximum score m, sum of
// exp(score - m) and unnormalized weighted sum of values to `partial` (head, chunk, head_size + 2), and
// the last of the head's chunks to finish (its count in `arrivals`, one per head) rescales and adds them.
// CPU shapes take one chunk.
#if SHAPE_FAMILY == SHAPE_GPU
// Chunks whose partial results a work-item loads at once when combining them: one wait on memory for a
// head of up to this many chunks (KernelSet::kMaxAttentionChunks, unless the context is very long).
#define COMBINE_BATCH 8

// Element i of a head's output from its chunks' partial results (`p`: the head's first chunk): with M the
// largest chunk maximum, out_i = sum_c exp(m_c - M) o_c,i / sum_c exp(m_c - M) s_c. The sums run over
// batches of chunks, rescaled to each batch's running maximum (the first batch's rescale multiplies zeros):
// with one batch, the terms are added in chunk order to the exact maximum.
inline float combined_output(__global const float* p, int i, int head_size, int chunks) {
    const int stride = head_size + 2;
    float m = -INFINITY, total = 0.0f, acc = 0.0f;
    for (int c0 = 0; c0 < chunks; c0 += COMBINE_BATCH) {
        float mc[COMBINE_BATCH], sc[COMBINE_BATCH], oc[COMBINE_BATCH];
#pragma unroll
        for (int k = 0; k < COMBINE_BATCH; k++) {
            const int c = c0 + k, inside = c < chunks;  // a chunk past the head's adds exp(-inf) * 0
            mc[k] = inside ? p[c * stride] : -INFINITY;
            sc[k] = inside ? p[c * stride + 1] : 0.0f;
            oc[k] = inside ? p[c * stride + 2 + i] : 0.0f;
        }
        float batch_max = m;
#pragma unroll
        for (int k = 0; k < COMBINE_BATCH; k++) batch_max = fmax(batch_max, mc[k]);
        const float rescale = model_exp(m - batch_max);
        total *= rescale;
        acc *= rescale;
#pragma unroll
        for (int k = 0; k < COMBINE_BATCH; k++) {
            const float e = model_exp(mc[k] - batch_max);
            total += e * sc[k];
            acc += e * oc[k];
        }
        m = batch_max;
    }
    return acc / total;
}

// The heads' outputs from their chunks' partial results.
inline void attention_combine(int h, __global const float* partial, __global float* out, int head_size, int chunks) {
    __global const float* p = partial + (size_t)h * chunks * (head_size + 2);
    for (int i = get_local_id(0); i < head_size; i += get_local_size(0))
        out[h * head_size + i] = combined_output(p, i, head_size, chunks);
}

// Where a chunk's scores live while its softmax and weighted sum read them: builds with device fences
// (but for ordered sums: KernelSet::chunked_attention) keep them in the work-group's local memory
// (`scores`, SCORE_CAPACITY floats; the host splits a head into chunks no longer than that:
// KernelSet::attention_chunks), so that no step of the chain waits on global memory for them; without, a
// head is one chunk of any length, and its scores go to its row of `att` (which builds with fences never
// touch: the token kernel passes none).
#if defined(DEVICE_FENCES) && !defined(ORDERED_SUMS)
#define CHUNKED_ATTENTION
#endif
#ifdef CHUNKED_ATTENTION
#define SCORE(t) scores[(t) - t0]
#else
#define SCORE(t) att[(size_t)h * seq_len + (t)]
#endif

// Positions whose values a work-item loads together in the weighted sum: one at a time, a short chunk's
// few work-items per column wait on memory once per position.
#define VALUE_BATCH 4

// Column c of the values at positions t, t + parts, ... (VALUE_BATCH of them; zeros from t1 on).
inline void load_values(__private float4* v, __global const float* value_cache, int t, int t1, int parts, int c,
                        int kv_dim, size_t kv_off, int vec) {
#pragma unroll
    for (int k = 0; k < VALUE_BATCH; k++) {
        const int tk = t + k * parts;
        v[k] = (float4)(0.0f);
        if (tk < t1) {
            __global const float* row = value_cache + (size_t)tk * kv_dim + kv_off;
            v[k] = vec ? ((__global const float4*)row)[c] : (float4)(row[c], 0.0f, 0.0f, 0.0f);
        }
    }
}

// The (head, chunk) of work unit `unit`: unit = head * chunks + chunk.
UNIT_FUNCTION void attention_unit(int unit, __global const float* q, __global const float* key_cache,
                                  __global const float* value_cache, __global float* att, __global float* out,
                                  __global float* partial_out, volatile __global uint* arrivals, int head_size,
                                  int kv_dim, int kv_mul, int seq_len, int pos, int chunk_len,
                                  __local float* scratch, __local float4* partial, __local float* scores,
                                  __local int* last) {
    // The chunk's positions are spread over the work-group's work-items for the scores and the softmax,
    // then (position slice, column) pairs for the weighted sum of values, where a column is a float4 of
    // the head when head_size allows it.
    const float scale = sqrt((float)head_size);
    const int chunks = (pos + chunk_len) / chunk_len;
    // Remainders here are taken as products: a / and % pair of one operand compiles to LLVM's `freeze`,
    // which Oclgrind's uninitialized-value check cannot run.
    const int h = unit / chunks, chunk = unit - h * chunks;
    const int t0 = chunk * chunk_len, t1 = min(t0 + chunk_len, pos + 1);  // this group's positions
    const int lid = get_local_id(0);
    __global const float* qh = q + h * head_size;
    const size_t kv_off = (size_t)(h / kv_mul) * head_size;
    const int vec = head_size % 4 == 0;
    // The weighted sum's layout: work-item lid takes column lid % span (of the first round) in position
    // slice lid / span.
    const int cols = vec ? head_size / 4 : head_size;
    const int span = cols < LOCAL ? cols : LOCAL;  // work-items per position slice
#ifdef ORDERED_SUMS
    const int parts = 1;  // (a column's every position in order, by one work-item: run.c's)
#else
    const int parts = LOCAL / span;  // position slices summed in parallel
#endif
    const int part = lid / span, column = lid - part * span;
    float4 v[VALUE_BATCH];  // a batch of values
#ifdef FEW_GROUPS
    // The token kernel's few work-groups wait on memory at every link of the chain; the first batch of
    // values does not depend on the scores, so it is loaded with the keys.
    load_values(v, value_cache, t0 + part, part < parts ? t1 : t0, parts, column, kv_dim, kv_off, vec);
    int loaded = 1;
#else
    int loaded = 0;
#endif
    // Scores: KEY_SLICES work-items per position, each taking a slice of the head's float4 columns, the
    // slices summed through local memory. A work-item walking a whole key alone leaves a short context
    // with few work-items each waiting on a chain of loads; ordered sums take that, run.c's order.
#ifdef ORDERED_SUMS
    const int slices = 1, key_words = 0;
#else
    const int slices = vec ? min(KEY_SLICES, LOCAL) : 1, key_words = vec;
#endif
    const int per_pass = LOCAL / slices;  // positions scored per pass
    const int slot = lid / slices, slice = lid - slot * slices;  // this work-item's position in a pass, its slice
    float local_max = -INFINITY;
    for (int base = t0; base < t1; base += per_pass) {  // the same passes for every work-item (barriers)
        const int t = base + slot;
        float piece = 0.0f;  // this work-item's slice of the score
        if (t < t1) {
            __global const float* k = key_cache + (size_t)t * kv_dim + kv_off;
            if (key_words) {
                // float4 pointers rather than vload4, which promises only a float's alignment: NVIDIA's
                // compiler splits each vload4 into four scalar loads. Valid here:
                // with head_size a multiple of 4 so are kv_dim and every offset, buffers (sub-buffers too)
                // start at the device's base-address alignment, and the token kernel's layer stride
                // (STRIDE_CACHE) is a multiple of 4 rounded up to that alignment.
                __global const float4* q4 = (__global const float4*)qh;
                __global const float4* k4 = (__global const float4*)k;
                for (int i = slice; i < head_size / 4; i += slices) piece += dot4(q4[i], k4[i]);
            } else {
                for (int i = 0; i < head_size; i++) piece += qh[i] * k[i];
            }
        }
#ifdef WARP_SHUFFLE
        // The slices are consecutive work-items of a warp: slice 0 adds the others' pieces in slice order.
        float score = piece;
        for (int i = 1; i < slices; i++) score += shuffle_xor(piece, i);
#else
        scratch[lid] = piece;
        barrier(CLK_LOCAL_MEM_FENCE);
        float score = 0.0f;
        if (slice == 0)
            for (int i = 0; i < slices; i++) score += scratch[lid + i];
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        if (slice == 0 && t < t1) {
            score /= scale;
            SCORE(t) = score;
            local_max = fmax(local_max, score);
        }
    }
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);  // the softmax below reads scores other work-items wrote
    const float max_val = group_reduce(local_max, 1, scratch);
    float local_sum = 0.0f;
    for (int t = t0 + lid; t < t1; t += LOCAL) {
        const float e = model_exp(SCORE(t) - max_val);
        SCORE(t) = e;
        local_sum += e;
    }
#ifdef ORDERED_SUMS
    // run.c's softmax: the weights' sum in position order, then each weight divided by it (a head is one
    // chunk), which leaves the weighted sum's output as it is. A work-item's rounds hold the weights it wrote.
    float total = 0.0f;
    for (int base = t0; base < t1; base += LOCAL) {
        scratch[lid] = base + lid < t1 ? SCORE(base + lid) : 0.0f;
        add_round_in_order(&total, scratch, min(LOCAL, t1 - base));
    }
    const float sum = first_items(total, scratch), inv_sum = 1.0f;
    for (int t = t0 + lid; t < t1; t += LOCAL) SCORE(t) /= sum;
#else
    const float sum = group_reduce(local_sum, 0, scratch);
    const float inv_sum = 1.0f / sum;
#endif
    // Every weight of this chunk is written before anyone reads them.
    barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);

    __global float* o = out + h * head_size;
    // Every work-item runs the same iterations (a barrier inside a loop must be reached uniformly, even
    // when the branch around it is not taken); `active` says whether this one has a column this round.
    for (int c0 = 0; c0 < cols; c0 += span) {
        const int c = c0 + column;
        const int active = c < cols && part < parts;
        float4 acc = (float4)(0.0f);
        if (active) {
            // Positions t, t + parts, ... in that order, VALUE_BATCH of them loaded at once (a position past
            // the chunk adds a zero weight times zero).
            for (int t = t0 + part; t < t1; t += VALUE_BATCH * parts) {
                if (!loaded) load_values(v, value_cache, t, t1, parts, c, kv_dim, kv_off, vec);
                loaded = 0;  // later batches, and later rounds' columns
#pragma unroll
                for (int k = 0; k < VALUE_BATCH; k++) acc += (t + k * parts < t1 ? SCORE(t + k * parts) : 0.0f) * v[k];
            }
        }
        loaded = 0;  // (a work-item without a position or column this round did not use its batch)
        if (parts > 1) {  // the slices meet in local memory (uniform branch: parts is the same everywhere)
            partial[lid] = acc;
            barrier(CLK_LOCAL_MEM_FENCE);
            if (part == 0)
                for (int p = 1; p < parts; p++) acc += partial[p * span + column];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (part != 0 || c >= cols) continue;  // the first slice holds the total (with parts == 1, the only one)
        if (chunks > 1) {
            __global float* p = partial_out + ((size_t)h * chunks + chunk) * (head_size + 2) + 2;
            if (vec) vstore4(acc, c, p);
            else p[c] = acc.x;
        } else if (vec) {
            vstore4(acc * inv_sum, c, o);
        } else {
            o[c] = acc.x * inv_sum;
        }
    }
#ifdef DEVICE_FENCES  // (without, the host never splits a head: KernelSet::attention_chunks)
    if (chunks > 1 && lid == 0) {
        __global float* p = partial_out + ((size_t)h * chunks + chunk) * (head_size + 2);
        p[0] = max_val;
        p[1] = sum;
    }
    // Outside any branch: PoCL's compiler mishandles barriers under one, even a uniform one.
    if (last_to_arrive(chunks > 1 ? &arrivals[h] : 0, chunks, last))
        attention_combine(h, partial_out, out, head_size, chunks);
#endif
}
#endif

__kernel void attention(__global const float* q, __global const float* key_cache, __global const float* value_cache,
                        __global float* att, __global float* out, __global float* partial_out,
                        volatile __global uint* arrivals, int n_heads, int head_size, int kv_dim, int kv_mul,
                        int seq_len, int pos, int chunk_len) {
#if SHAPE_FAMILY != SHAPE_GPU
    attention_head(get_global_id(0), q, key_cache, value_cache, att, out, n_heads, head_size, kv_dim, kv_mul,
                   seq_len, pos);
#else
    __local float scratch[LOCAL];
    __local float4 partial[LOCAL];
#ifdef CHUNKED_ATTENTION
    __local float scores[SCORE_CAPACITY];
#else
    __local float* scores = 0;  // (unused: the scores go to `att`)
#endif
    __local int last;
    attention_unit(get_group_id(0), q, key_cache, value_cache, att, out, partial_out, arrivals, head_size, kv_dim,
                   kv_mul, seq_len, pos, chunk_len, scratch, partial, scores, &last);
#endif
}

