// Prefill's causal attention on the GPU family (SHAPE_GPU): the batch's positions pos, pos + 1, ... over the
// cache, which holds their keys and values already (position pos + p attends to cache positions
// 0..pos + p), keys ATT_KEYS at a time, in blocks of ATT_QUERIES positions. Causality gives block b b + 1
// tiles of the batch's keys (besides those cached before it), so a work-group takes block b and then
// block blocks - 1 - b of one head: every work-group gets the same work, where a work-group per block
// would leave the last blocks' running alone at the launch's end.
//
// The block's queries and each tile of keys, then of values, are staged in local memory (rows of
// `stride` floats: head_size rounded up to odd, so that a column's reads fall in distinct banks; the host
// sizes the buffers: KernelSet::attention_tiles_local; a tile of keys and one of values together would
// not fit NVIDIA's 48 KiB for heads of 128). ATT_LANES work-items share a query: each scores keys lane,
// lane + ATT_LANES, ... of the tile and accumulates output columns lane, lane + ATT_LANES, ...
// The softmax is online (flash attention): the running maximum m of the query's scores, the running sum
// l of exp(score - m) (each lane its own part) and the output, rescaled by exp(m_old - m) whenever m
// grows, divided by l at the end. The scores never leave the work-group.
#if SHAPE_FAMILY == SHAPE_GPU
#define ATT_QUERIES 32
#define ATT_KEYS 32
#define ATT_LANES 8                                  // ATT_QUERIES x ATT_LANES = 256 work-items
#define ATT_KEYS_PER_LANE (ATT_KEYS / ATT_LANES)
#define ATT_HEAD_MAX 128                             // KernelSet::kAttentionTilesHeadMax
#define ATT_COLUMNS (ATT_HEAD_MAX / ATT_LANES)       // output columns a work-item may own
#define ATT_SCORE_STRIDE (ATT_KEYS + 1)

// Rows t0.. of a cache (`rows` of them valid, zeros after) into `tile`, head_size floats from `offset`.
inline void attention_stage(__local float* tile, __global const float* cache, int t0, int rows, int head_size,
                            int stride, int kv_dim, size_t offset) {
    for (int e = get_local_id(0); e < ATT_KEYS * head_size; e += ATT_QUERIES * ATT_LANES) {
        const int r = e / head_size, d = e - r * head_size;  // (a product: see attention.cl)
        tile[r * stride + d] = r < rows ? cache[(size_t)(t0 + r) * kv_dim + offset + d] : 0.0f;
    }
}

// Query block `block` of the batch, head h.
inline void attention_block(int block, int h, __global const float* q, __global const float* key_cache,
                            __global const float* value_cache, __global float* out, int n_heads, int head_size,
                            int kv_dim, int kv_mul, int pos, int positions, __local float* queries,
                            __local float* keys, __local float* scores, __local float* exchange) {
    const int p0 = block * ATT_QUERIES;
    // (An unsigned quotient, not a product, breaks the / and % pair here: PoCL runs the kernel slower with
    // lane as a product. See attention.cl.)
    const int tid = get_local_id(0), row = (uint)tid / ATT_LANES, lane = tid % ATT_LANES;
    const int dim = n_heads * head_size, stride = head_size | 1;
    const size_t kv_off = (size_t)(h / kv_mul) * head_size;
    const float scale = sqrt((float)head_size);
    // Rows past the batch compute the batch's last query, and store nothing.
    const int p = min(p0 + row, positions - 1), query_pos = pos + p;
    const int keys_total = pos + min(p0 + ATT_QUERIES, positions);  // the block's last query sees them all
    for (int e = tid; e < ATT_QUERIES * head_size; e += ATT_QUERIES * ATT_LANES) {
        const int r = e / head_size, d = e - r * head_size;  // (a product: see attention.cl)
        queries[r * stride + d] = q[(size_t)min(p0 + r, positions - 1) * dim + h * head_size + d];
    }
    float m = -INFINITY, l = 0.0f, o[ATT_COLUMNS];
#pragma unroll
    for (int c = 0; c < ATT_COLUMNS; c++) o[c] = 0.0f;

    for (int t0 = 0; t0 < keys_total; t0 += ATT_KEYS) {
        const int rows = min(ATT_KEYS, keys_total - t0);
        barrier(CLK_LOCAL_MEM_FENCE);  // the last tile's values are read (and, the first time, the queries written)
        attention_stage(keys, key_cache, t0, rows, head_size, stride, kv_dim, kv_off);
        barrier(CLK_LOCAL_MEM_FENCE);
        float s[ATT_KEYS_PER_LANE];
#pragma unroll
        for (int k = 0; k < ATT_KEYS_PER_LANE; k++) s[k] = 0.0f;
        __local const float* qr = queries + row * stride;
        for (int d = 0; d < head_size; d++) {
            const float qd = qr[d];
#pragma unroll
            for (int k = 0; k < ATT_KEYS_PER_LANE; k++) s[k] = fma(qd, keys[(lane + k * ATT_LANES) * stride + d], s[k]);
        }
        float tile_max = -INFINITY;
#pragma unroll
        for (int k = 0; k < ATT_KEYS_PER_LANE; k++) {
            const int t = t0 + lane + k * ATT_LANES;
            s[k] = t <= query_pos ? s[k] / scale : -INFINITY;  // causal: no key after the query's own
            tile_max = fmax(tile_max, s[k]);
        }
        exchange[tid] = tile_max;
        barrier(CLK_LOCAL_MEM_FENCE);
        float m_new = m;
        for (int i = 0; i < ATT_LANES; i++) m_new = fmax(m_new, exchange[row * ATT_LANES + i]);
        // Key 0 is every query's, so m_new is finite from the first tile on; exp(-inf) rescales nothing.
        const float rescale = model_exp(m - m_new);
        m = m_new;
        l *= rescale;
#pragma unroll
        for (int c = 0; c < ATT_COLUMNS; c++) o[c] *= rescale;
#pragma unroll
        for (int k = 0; k < ATT_KEYS_PER_LANE; k++) {
            const float e = model_exp(s[k] - m);
            l += e;
            scores[row * ATT_SCORE_STRIDE + lane + k * ATT_LANES] = e;
        }
        barrier(CLK_LOCAL_MEM_FENCE);  // the keys are read, every weight written
        attention_stage(keys, value_cache, t0, rows, head_size, stride, kv_dim, kv_off);
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int j = 0; j < rows; j++) {
            const float w = scores[row * ATT_SCORE_STRIDE + j];
            __local const float* v = keys + j * stride;
#pragma unroll
            for (int c = 0; c < ATT_COLUMNS; c++) {
                const int d = lane + c * ATT_LANES;
                if (d < head_size) o[c] = fma(w, v[d], o[c]);
            }
        }
    }
    // The query's sum of weights from its lanes' parts.
    barrier(CLK_LOCAL_MEM_FENCE);
    exchange[tid] = l;
    barrier(CLK_LOCAL_MEM_FENCE);
    float total = 0.0f;
    for (int i = 0; i < ATT_LANES; i++) total += exchange[row * ATT_LANES + i];
    if (p0 + row >= positions) return;
    __global float* o_row = out + (size_t)p * dim + h * head_size;
#pragma unroll
    for (int c = 0; c < ATT_COLUMNS; c++) {
        const int d = lane + c * ATT_LANES;
        if (d < head_size) o_row[d] = o[c] / total;
    }
}

__kernel void attention_tiles(__global const float* q, __global const float* key_cache,
                              __global const float* value_cache, __global float* out, int n_heads, int head_size,
                              int kv_dim, int kv_mul, int pos, int positions, __local float* queries,
                              __local float* keys, __local float* scores, __local float* exchange) {
    const int blocks = (positions + ATT_QUERIES - 1) / ATT_QUERIES;
    const int first = get_group_id(0), second = blocks - 1 - first;
    attention_block(first, get_group_id(1), q, key_cache, value_cache, out, n_heads, head_size, kv_dim, kv_mul, pos,
                    positions, queries, keys, scores, exchange);
    if (second == first) return;
    barrier(CLK_LOCAL_MEM_FENCE);  // the first block's queries, keys and sums are read
    attention_block(second, get_group_id(1), q, key_cache, value_cache, out, n_heads, head_size, kv_dim, kv_mul, pos,
                    positions, queries, keys, scores, exchange);
}

#endif
