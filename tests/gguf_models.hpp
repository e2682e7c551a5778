#pragma once
// Llama models as GGUF images for tests: a shape's llama.* metadata, f32 tensors whose values a test
// chooses, and the vocabulary (every tokenizer.* key) of another GGUF file.
#include <cstdint>
#include <functional>
#include <string>

#include "gguf_builder.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/gguf_file.hpp"

namespace llamacl::test {

// A tensor's element `index` (row-major, [out][in]) by the tensor's GGUF name.
using TensorFill = std::function<float(const std::string& name, std::uint64_t index)>;

inline GgufBuilder llama_gguf(const Config& c, const GgufFile& vocabulary, const TensorFill& fill) {
    GgufBuilder b;
    b.string("general.architecture", "llama")
        .u32("llama.embedding_length", static_cast<std::uint32_t>(c.dim))
        .u32("llama.feed_forward_length", static_cast<std::uint32_t>(c.hidden_dim))
        .u32("llama.block_count", static_cast<std::uint32_t>(c.n_layers))
        .u32("llama.attention.head_count", static_cast<std::uint32_t>(c.n_heads))
        .u32("llama.attention.head_count_kv", static_cast<std::uint32_t>(c.n_kv_heads))
        .u32("llama.context_length", static_cast<std::uint32_t>(c.seq_len))
        .f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps)
        .f32("llama.rope.freq_base", c.rope_base);
    for (const auto& [key, value] : vocabulary.metadata()) {
        if (key.rfind("tokenizer.", 0) != 0) continue;
        GgufBytes raw;
        if (value.type == GgufType::array)
            raw = le(static_cast<std::uint32_t>(value.element_type)) + le<std::uint64_t>(value.count);
        else if (value.type == GgufType::string)
            raw = le<std::uint64_t>(value.bytes);
        raw.insert(raw.end(), value.data, value.data + value.bytes);
        b.raw(key, value.type, raw);
    }
    const auto add = [&](const std::string& name, std::uint64_t rows, std::uint64_t columns) {
        GgufBytes data(rows * columns * sizeof(float));
        for (std::uint64_t i = 0; i < rows * columns; ++i) {
            const float v = fill(name, i);
            std::memcpy(data.data() + i * sizeof v, &v, sizeof v);
        }
        b.tensor(name, 0, rows == 1 ? std::vector<std::uint64_t>{columns} : std::vector<std::uint64_t>{columns, rows},
                 std::move(data));
    };
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    add("token_embd.weight", vocab, dim);
    if (!c.shared_classifier) add("output.weight", vocab, dim);
    add("output_norm.weight", 1, dim);
    for (int l = 0; l < c.n_layers; ++l) {
        const std::string p = "blk." + std::to_string(l) + ".";
        add(p + "attn_norm.weight", 1, dim);
        add(p + "attn_q.weight", dim, dim);
        add(p + "attn_k.weight", kv, dim);
        add(p + "attn_v.weight", kv, dim);
        add(p + "attn_output.weight", dim, dim);
        add(p + "ffn_norm.weight", 1, dim);
        add(p + "ffn_gate.weight", hidden, dim);
        add(p + "ffn_down.weight", dim, hidden);
        add(p + "ffn_up.weight", hidden, dim);
    }
    return b;
}

}  // namespace llamacl::test
