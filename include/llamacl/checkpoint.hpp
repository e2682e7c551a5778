#pragma once
// A model's description whatever its file: the shape and the math's parameters (Config,
// model_config.hpp), the byte counts
// every other module plans with (ModelSize), and read-only views of the weights. llama2.c checkpoints are
// memory-mapped: fp32 (versions 0 and 1) or Q8_0 (version 2); GGUF files are read into one format the
// runtime reads (gguf_model.hpp); either may be converted in memory (--weights).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "llamacl/host_memory.hpp"
#include "llamacl/model_config.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

// One source of truth for sizes: info, the device capacity plan, bench and the tests all use this.
struct ModelSize {
    explicit ModelSize(const Config& c);
    std::uint64_t layer_params;       // all tensors of one transformer layer
    std::uint64_t embedding_params;   // vocab x dim
    std::uint64_t classifier_params;  // vocab x dim when unshared, else 0
    std::uint64_t total_params;       // every tensor, the shared classifier counted once
    // As stored: the norms in fp32, the layers' matrices in the config's weight format, the embedding table
    // and the classifier in its classifier_format().
    std::uint64_t layer_bytes() const { return layer_bytes_; }    // one layer
    std::uint64_t weight_bytes() const { return weight_bytes_; }  // every tensor, a shared classifier once
    std::uint64_t embedding_bytes() const { return embedding_bytes_; }  // vocab x dim: the table, or the classifier
    std::uint64_t kv_cache_bytes;     // keys and values for every layer over the full context
    // The CPU reference's activations: run.c's RunState without the KV cache. (The device's working
    // buffers are WorkingBuffers::Sizes'.)
    std::uint64_t reference_activation_bytes;

private:
    std::uint64_t layer_bytes_, weight_bytes_, embedding_bytes_;
};

// One layer's tensors, row-major as llama2.c stores them ([out][in]); the norms are always fp32.
struct LayerWeights {
    WeightTensor rms_att;  // (dim)
    WeightTensor wq;       // (dim, dim)
    WeightTensor wk;       // (kv_dim, dim)
    WeightTensor wv;       // (kv_dim, dim)
    WeightTensor wo;       // (dim, dim)
    WeightTensor rms_ffn;  // (dim)
    WeightTensor w1;       // (hidden_dim, dim)
    WeightTensor w2;       // (dim, hidden_dim)
    WeightTensor w3;       // (hidden_dim, dim)
};

// The file a model came from: it decides the semantics (run.c's or llama.cpp's) and the vocabulary's source.
enum class ModelFile { llama2c, gguf };

class Checkpoint {
public:
    // Memory-maps and validates a llama2.c checkpoint (legacy v0, export v1, or Q8_0 export v2), or reads a
    // GGUF file (gguf_model.hpp). Throws llamacl::Error naming the file and the problem for anything
    // malformed; never reads past the file.
    static Checkpoint open(const std::string& path);
    // A checkpoint held in memory: `data` is a complete file image (header and tensors).
    static Checkpoint from_image(HostBytes image, const std::string& name);
    // Tensors without a header, in export order (versions 1 and 2: the fp32 norms, then the embedding
    // table, each layer's matrices and the unshared classifier: the matrices in `config.weight_format`,
    // the table and the classifier in `config.classifier_format()`), as written by
    // convert_weights() (export.hpp) and the GGUF loader; `file` and `version` say where they came from.
    static Checkpoint from_tensors(const Config& config, HostBytes tensors, const std::string& name, int version,
                                   ModelFile file = ModelFile::llama2c, std::string load_note = {});

    const Config& config() const { return config_; }
    const WeightFormat& weight_format() const { return config_.weight_format; }
    // llama2.c: 0 (legacy), 1 ("ak42" fp32 export) or 2 (Q8_0 export); GGUF: the container's version.
    int version() const { return version_; }
    ModelFile file() const { return file_; }
    const std::string& path() const { return path_; }
    // What loading changed of the file's tensors (GGUF types dequantized at load), or empty.
    const std::string& load_note() const { return load_note_; }

    // Views of layer l's tensors, made on each call: a model holds no table per layer.
    LayerWeights layer(int l) const;
    // (vocab, dim) in fp32. runq.c dequantizes a Q8_0 table at load; we do at the first call (and widen
    // halves), so that what never reads it (info, quantize) never pays 4 bytes a weight for it.
    const float* token_embedding() const;
    const float* rms_final() const { return rms_final_; }             // (dim)
    const WeightTensor& classifier() const { return classifier_; }    // (vocab, dim)
    // The token embedding table as stored: the classifier too, when shared.
    const WeightTensor& embedding_weights() const { return embedding_; }

private:
    struct Storage;
    // `count` tensors of one shape and format back to back (one per layer, or one): the first's view and
    // the bytes from each one's values, and scales, to the next's.
    struct TensorRun {
        WeightTensor first;
        std::uint64_t stride = 0, scale_stride = 0;
        WeightTensor at(std::uint64_t i) const;
    };
    Checkpoint() = default;
    void map_tensors(const std::byte* base, std::uint64_t size);
    // Views of the tensors that start at `p` (their sizes checked), in the legacy or the export order.
    void map_weights(const std::byte* p, bool legacy);

    std::shared_ptr<Storage> storage_;
    std::string path_;
    Config config_;
    int version_ = 0;
    ModelFile file_ = ModelFile::llama2c;
    std::string load_note_;
    std::vector<std::pair<WeightTensor LayerWeights::*, TensorRun>> layer_tensors_;  // each tensor's layers
    WeightTensor embedding_, classifier_;
    const float* rms_final_ = nullptr;
};

}  // namespace llamacl
