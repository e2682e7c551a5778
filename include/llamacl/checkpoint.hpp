#pragma once
// llama2.c checkpoints: the model's shape (Config), the byte counts every other module plans with
// (ModelSize), and read-only views of the fp32 weights, memory-mapped from the file.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

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

    int head_size() const { return dim / n_heads; }
    int kv_dim() const { return dim / n_heads * n_kv_heads; }
    int kv_mul() const { return n_heads / n_kv_heads; }  // query heads per KV head
};

// The model as a run that reaches only `positions` positions sees it (0, or more than seq_len: the whole
// context): seq_len lowered to them, so that everything sized per position (the KV cache, attention's
// scores, the RoPE table) is sized by what the run can reach, not by the header alone.
Config within_positions(const Config& c, int positions);

// One source of truth for sizes: info, the device capacity plan, bench and the tests all use this.
struct ModelSize {
    explicit ModelSize(const Config& c);
    std::uint64_t layer_params;       // all tensors of one transformer layer
    std::uint64_t embedding_params;   // vocab x dim
    std::uint64_t classifier_params;  // vocab x dim when unshared, else 0
    std::uint64_t total_params;       // every tensor, the shared classifier counted once
    std::uint64_t layer_bytes() const { return layer_params * sizeof(float); }
    std::uint64_t weight_bytes() const { return total_params * sizeof(float); }
    std::uint64_t kv_cache_bytes;     // keys and values for every layer over the full context
    // The CPU reference's activations: run.c's RunState without the KV cache. (The device's working
    // buffers are WorkingBuffers::Sizes'.)
    std::uint64_t reference_activation_bytes;
};

// Pointers to one layer's tensors, row-major as llama2.c stores them ([out][in]).
struct LayerWeights {
    const float* rms_att;  // (dim)
    const float* wq;       // (dim, dim)
    const float* wk;       // (kv_dim, dim)
    const float* wv;       // (kv_dim, dim)
    const float* wo;       // (dim, dim)
    const float* rms_ffn;  // (dim)
    const float* w1;       // (hidden_dim, dim)
    const float* w2;       // (dim, hidden_dim)
    const float* w3;       // (hidden_dim, dim)
};

class Checkpoint {
public:
    // Memory-maps and validates a llama2.c checkpoint (legacy v0 or export v1). Throws llamacl::Error
    // naming the file and the problem for anything malformed; never reads past the file.
    static Checkpoint open(const std::string& path);
    // A checkpoint held in memory: `data` is a complete file image (header and tensors).
    static Checkpoint from_image(std::vector<std::byte> image, const std::string& name);

    const Config& config() const { return config_; }
    int version() const { return version_; }  // 0 (legacy) or 1 ("ak42" export)
    const std::string& path() const { return path_; }

    LayerWeights layer(int l) const;
    const float* token_embedding() const { return token_embedding_; }  // (vocab, dim)
    const float* rms_final() const { return rms_final_; }              // (dim)
    const float* classifier() const { return classifier_; }            // (vocab, dim)

private:
    struct Storage;
    Checkpoint() = default;
    void map_tensors(const std::byte* base, std::uint64_t size);

    std::shared_ptr<Storage> storage_;
    std::string path_;
    Config config_;
    int version_ = 0;
    // Each points at the tensor for layer 0; layer l is at offset l * (tensor size).
    const float* rms_att_ = nullptr;
    const float* wq_ = nullptr;
    const float* wk_ = nullptr;
    const float* wv_ = nullptr;
    const float* wo_ = nullptr;
    const float* rms_ffn_ = nullptr;
    const float* w1_ = nullptr;
    const float* w2_ = nullptr;
    const float* w3_ = nullptr;
    const float* token_embedding_ = nullptr;
    const float* rms_final_ = nullptr;
    const float* classifier_ = nullptr;
};

}  // namespace llamacl
