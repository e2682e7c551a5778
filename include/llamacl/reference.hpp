#pragma once
// The CPU reference forward pass: exactly run.c's operations in run.c's order (runq.c's for Q8_0 weights),
// so that its logits match llama2.c bit for bit on x86-64; a model's own parameters (Config's norm_eps,
// RoPE base and factors, its Q8_0 rule) enter those same steps. It is a backend of its own (--backend cpu)
// and the oracle the OpenCL runtime is tested and --compare-cpu'd against. Its building blocks are
// model_math.hpp's.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "llamacl/checkpoint.hpp"
#include "llamacl/forward.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/model_math.hpp"

namespace llamacl {

class ReferenceForward : public Forward {
public:
    // Positions 0 .. positions - 1 can be run (0: the model's whole context, seq_len).
    explicit ReferenceForward(const Checkpoint& checkpoint, int positions = 0);
    std::span<float> forward(int token, int pos) override;
    // As forward(), reporting every boundary to `observer` (which may be empty).
    std::span<float> forward(int token, int pos, const BoundaryObserver& observer);
    // The positions in batches of up to kBatch, each layer's matmuls reading the weights once for the
    // batch (model_math.hpp), every other step position by position; each position's bits are forward()'s.
    std::span<float> prefill(std::span<const int> tokens, int first, const LogitsObserver& each = {}) override;
    static constexpr int kBatch = 32;
    // What a prompt's batch adds to one position's activations (ModelSize::reference_activation_bytes):
    // kBatch - 1 more positions' rows and matmul inputs, and with every_logit (perplexity, --compare-cpu)
    // the batch's logits.
    static std::uint64_t batch_bytes(const Config& c, bool every_logit);
    // The copy of the f32 matrices laid out for matmul's row blocks (lay_out_row_blocks), made for a run
    // that reaches kLayOutPositions positions where it takes at most kLayOutBytes and an eighth of the
    // machine's memory: its bytes, or 0 where the weights are not f32 or the copy would be larger.
    static constexpr int kLayOutPositions = 64;
    static constexpr std::uint64_t kLayOutBytes = std::uint64_t{1024} << 20;
    static std::uint64_t laid_out_bytes(const Config& c);
    // The keys (op k) or values (op v) of `layer` at positions [first, first + count), kv_dim each.
    std::span<const float> cache_rows(int layer, Op op, int first, int count) const;

private:
    // Positions [pos, pos + tokens.size()) (at most kBatch; act_ holds them) through every layer, their
    // residual streams left in act_.x: each step for every position before the next, so that their keys
    // and values are in the cache before any of them attends (each only to those before it), and each
    // matmul reads the weights once for them. A single position's boundaries go to `observer`.
    void run_layers(std::span<const int> tokens, int pos, const BoundaryObserver& observer);
    // Multihead attention of the query q at pos over layer l's cache into xb (dim), the heads shared among
    // the threads as run.c's OpenMP loop shares them.
    void attention(int l, int pos, const float* q, float* xb);
    float* key_row(int l, int pos) { return key_cache_.data() + cache_offset(l, pos); }
    float* value_row(int l, int pos) { return value_cache_.data() + cache_offset(l, pos); }
    std::size_t cache_offset(int l, int pos) const {
        return (static_cast<std::size_t>(l) * c_.seq_len + pos) * c_.kv_dim();
    }
    // act_ grown to hold `positions` positions.
    void hold(int positions);

    // The f32 matrices laid out for matmul's row blocks (lay_out_row_blocks) into row_blocks_, where the
    // run repays the copy (laid_out_bytes); layer(l) and classifier_ are the matrices the passes read: the
    // checkpoint's, with row_blocks set where laid out.
    void lay_out_matrices();
    LayerWeights layer(int l) const;

    const Checkpoint& ck_;
    Config c_;  // seq_len: the positions this run can reach (within_positions)
    // run.c's RunState, (positions, width) each: activations rewritten every layer, one position's for
    // forward(), grown to kBatch by the first prefill (the batch's logits by the first that asks for every
    // position's), and their matmuls' inputs (runq.c's xq and hq); then the KV cache that grows with pos.
    struct Activations {
        int positions = 0;
        std::vector<float> x, xb, xb2, q, hb, hb2, logits;
        std::vector<MatmulInput> xin, hin, cin;  // the inputs of the layers' matrices and of the classifier
    };
    Activations act_;
    ZeroedFloats att_;  // (head, c_.seq_len)
    std::vector<float> logits_;
    ZeroedFloats key_cache_, value_cache_;  // (layer, c_.seq_len, kv_dim)
    std::unique_ptr<float[]> row_blocks_;
    WeightTensor classifier_;
};

}  // namespace llamacl
