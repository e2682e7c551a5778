#pragma once
// A model's shape and the parameters of its math (Config), whatever its file: what the math
// (model_math.hpp) and the loaders (checkpoint.hpp) share.
#include <optional>
#include <vector>

#include "llamacl/weight_format.hpp"

namespace llamacl {

struct Config {
    int dim = 0;         // transformer width
    int hidden_dim = 0;  // FFN width
    int n_layers = 0;
    int n_heads = 0;     // query heads
    int n_kv_heads = 0;  // key/value heads (< n_heads: grouped-query attention)
    int vocab_size = 0;  // always positive here; the v0 sign convention is decoded into shared_classifier
    int seq_len = 0;     // maximum context
    bool shared_classifier = true;  // classifier == token embedding table
    WeightFormat weight_format{};   // of the layers' matrices
    // Of the token embedding table and the classifier, where theirs is not the layers' (GGUF files from
    // llama-quantize keep them in Q6_K or Q8_0 beside Q4_0 layers); empty: weight_format.
    std::optional<WeightFormat> table_format{};
    // What run.c hard-codes, with run.c's values; a GGUF file's metadata sets them.
    float norm_eps = 1e-5f;     // RMSNorm's epsilon
    float rope_base = 10000.0f;  // RoPE: pair i of a head turns by pos * rope_base^(-2i / head_size)
    // Empty, or head_size / 2 factors: pair i's angle divided by rope_factors[i] (Llama 3's rope_freqs).
    std::vector<float> rope_factors{};
    // Whose arithmetic quantized weights follow, the file's family's: runq.c for llama2.c, ggml for GGUF.
    QuantRule quant_rule = QuantRule::runq;

    WeightFormat classifier_format() const { return table_format.value_or(weight_format); }
    int head_size() const { return dim / n_heads; }
    int kv_dim() const { return dim / n_heads * n_kv_heads; }
    int kv_mul() const { return n_heads / n_kv_heads; }  // query heads per KV head
};

// The model as a run that reaches only `positions` positions sees it (0, or more than seq_len: the whole
// context): seq_len lowered to them, so that everything sized per position (the KV cache, attention's
// scores, the RoPE table) is sized by what the run can reach, not by the header alone.
Config within_positions(const Config& c, int positions);

}  // namespace llamacl
