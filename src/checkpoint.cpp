#include "llamacl/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <list>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "llamacl/error.hpp"
#include "llamacl/gguf_model.hpp"
#include "llamacl/mapped_file.hpp"
#include "llamacl/model_math.hpp"

namespace llamacl {

namespace {

// What to do about a header that no llama2.c model has: the file is corrupt, or not a checkpoint.
constexpr const char* kReexport = "; export the model again (llama2.c's export.py) or download it again";

constexpr std::uint32_t kMagicAk42 = 0x616b3432;  // "ak42" read as a little-endian uint32
constexpr std::uint64_t kV1HeaderBytes = 256;
constexpr std::uint64_t kV0HeaderBytes = 7 * sizeof(std::int32_t);

// Header fields are untrusted: every size is computed with overflow checks so that a hostile header
// can neither wrap around to a small size nor make us allocate or read from its numbers.
std::uint64_t mul(std::uint64_t a, std::uint64_t b, bool& overflow) {
    std::uint64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) overflow = true;
    return r;
}
std::uint64_t add(std::uint64_t a, std::uint64_t b, bool& overflow) {
    std::uint64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) overflow = true;
    return r;
}

// Number of floats in each tensor family (all layers together), in file order for each version.
struct TensorCounts {
    std::uint64_t rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, embedding, freq_cis, classifier;
    bool overflow = false;
};

TensorCounts tensor_counts(const Config& c) {
    TensorCounts t{};
    bool& o = t.overflow;
    const std::uint64_t L = c.n_layers, dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim();
    t.rms_att = mul(L, dim, o);
    t.wq = mul(mul(L, dim, o), dim, o);
    t.wk = mul(mul(L, dim, o), kv, o);
    t.wv = t.wk;
    t.wo = t.wq;
    t.rms_ffn = t.rms_att;
    t.w1 = mul(mul(L, dim, o), hidden, o);
    t.w2 = t.w1;
    t.w3 = t.w1;
    t.rms_final = dim;
    t.embedding = mul(static_cast<std::uint64_t>(c.vocab_size), dim, o);
    // The legacy format stores two unused RoPE tables (real, imaginary), seq_len x head_size/2 each.
    t.freq_cis = mul(static_cast<std::uint64_t>(c.seq_len), static_cast<std::uint64_t>(c.head_size()), o);
    t.classifier = c.shared_classifier ? 0 : t.embedding;
    return t;
}

// What `elements` weights of `format` occupy, with overflow checks (WeightFormat::bytes has none).
std::uint64_t stored_bytes(const WeightFormat& format, std::uint64_t elements, bool& overflow) {
    if (format.type == ElementType::q4_0) return mul(elements / kQ4BlockSize, sizeof(Q4Block), overflow);
    if (format.type != ElementType::q8_0) return mul(elements, format.bytes(1), overflow);
    return add(elements, mul(elements / static_cast<std::uint64_t>(format.group_size), sizeof(float), overflow), overflow);
}

// The tensors' bytes after the header: fp32 norms (and v0's RoPE tables), the layers' matrices in the
// weight format, the embedding table and the classifier in theirs.
std::uint64_t tensor_bytes(const Config& c, bool legacy, bool& overflow) {
    const TensorCounts t = tensor_counts(c);
    overflow = t.overflow;
    std::uint64_t norms = 0, matrices = 0;
    for (std::uint64_t n : {t.rms_att, t.rms_ffn, t.rms_final}) norms = add(norms, n, overflow);
    if (legacy) norms = add(norms, t.freq_cis, overflow);
    for (std::uint64_t n : {t.wq, t.wk, t.wv, t.wo, t.w1, t.w2, t.w3}) matrices = add(matrices, n, overflow);
    const std::uint64_t tables = stored_bytes(c.classifier_format(), add(t.embedding, t.classifier, overflow), overflow);
    return add(add(mul(norms, sizeof(float), overflow), stored_bytes(c.weight_format, matrices, overflow), overflow),
               tables, overflow);
}

// The byte counts ModelSize derives for the device plan and the CPU reference (KV cache, working
// buffers) must not wrap around either; for v1 files seq_len is not tied to the file size at all.
bool memory_sizes_overflow(const Config& c) {
    bool o = false;
    const std::uint64_t L = c.n_layers, seq = c.seq_len, kv = c.kv_dim(), f = sizeof(float);
    mul(mul(mul(mul(2, L, o), seq, o), kv, o), f, o);  // KV cache
    std::uint64_t working = add(mul(4, static_cast<std::uint64_t>(c.dim), o), mul(2, kv, o), o);
    working = add(working, mul(2, static_cast<std::uint64_t>(c.hidden_dim), o), o);
    working = add(working, mul(static_cast<std::uint64_t>(c.n_heads), seq, o), o);
    working = add(working, static_cast<std::uint64_t>(c.vocab_size), o);
    mul(working, f, o);
    mul(mul(seq, static_cast<std::uint64_t>(c.head_size()), o), f, o);  // the device's RoPE table
    return o;
}

// Files that are often mistaken for llama2.c checkpoints, recognised by their first bytes so the
// message can say what the file is instead of reporting a nonsensical header.
std::string foreign_format(const std::byte* base, std::uint64_t size) {
    const auto starts_with = [&](std::string_view magic) {
        return size >= magic.size() && std::memcmp(base, magic.data(), magic.size()) == 0;
    };
    // A versioned header whose magic lost a byte: read as a legacy header, its dim would be over a billion.
    if (size >= 4) {
        std::uint32_t magic = 0;
        std::memcpy(&magic, base, sizeof magic);
        const std::uint32_t diff = magic ^ kMagicAk42;
        int bytes_off = 0;
        for (int i = 0; i < 4; ++i) bytes_off += ((diff >> (8 * i)) & 0xff) != 0;
        if (bytes_off == 1) {
            char hex[11];
            std::snprintf(hex, sizeof hex, "0x%08x", magic);
            return std::string("a damaged llama2.c header (magic ") + hex +
                   ", one byte from the 0x616b3432 (\"ak42\") of version 1 and 2 files)";
        }
    }
    if (starts_with("PK\x03\x04")) return "a zip archive (a PyTorch .pt/.pth checkpoint?)";
    if (starts_with("\x80\x02") || starts_with("\x80\x03") || starts_with("\x80\x04"))
        return "a Python pickle (a PyTorch checkpoint?)";
    if (size >= 10) {  // safetensors: a little-endian uint64 JSON length, then the JSON header
        std::uint64_t json = 0;
        std::memcpy(&json, base, sizeof json);
        if (static_cast<char>(base[8]) == '{' && static_cast<char>(base[9]) == '"' && json > 1 && json <= size - 8)
            return "a safetensors file (Hugging Face)";
    }
    // Text: a web page or an error message saved in place of the model (no header starts with 16 such bytes).
    const std::string_view head(reinterpret_cast<const char*>(base), std::min<std::uint64_t>(size, 16));
    std::string shown;
    for (char ch : head) {
        if (ch == '\t' || ch == '\n' || ch == '\r') ch = ' ';
        if (ch < ' ' || ch > '~') return "";
        shown += ch;
    }
    return "text (\"" + shown + "...\": a web page or an error message saved in place of the model?)";
}

std::string describe(const Config& c) {
    return "dim=" + std::to_string(c.dim) + " hidden_dim=" + std::to_string(c.hidden_dim) +
           " n_layers=" + std::to_string(c.n_layers) + " n_heads=" + std::to_string(c.n_heads) +
           " n_kv_heads=" + std::to_string(c.n_kv_heads) + " vocab_size=" + std::to_string(c.vocab_size) +
           " seq_len=" + std::to_string(c.seq_len);
}

// The seven int32 header fields shared by both versions. Returns the config with vocab_size made positive.
Config parse_config(const std::string& path, const std::int32_t h[7], bool legacy_sign_convention) {
    Config c;
    c.dim = h[0];
    c.hidden_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    c.seq_len = h[6];
    const std::int32_t vocab = h[5];
    // v0 marks an unshared classifier with a negative vocab_size; INT32_MIN has no positive twin.
    if (legacy_sign_convention && vocab < 0 && vocab != std::numeric_limits<std::int32_t>::min()) {
        c.vocab_size = -vocab;
        c.shared_classifier = false;
    } else {
        c.vocab_size = vocab;
    }
    const auto bad = [&](const std::string& why) {
        return Error(path + ": not a valid llama2.c checkpoint: " + why + " (header: " + describe(c) + ")" +
                     kReexport);
    };
    if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
        c.vocab_size <= 0 || c.seq_len <= 0)
        throw bad("every dimension must be positive");
    if (c.dim % c.n_heads != 0) throw bad("dim is not divisible by n_heads");
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
        throw bad("n_heads is not a multiple of n_kv_heads");
    if (c.head_size() % 2 != 0) throw bad("head size dim/n_heads is odd, RoPE needs pairs");
    // run.c starts every sequence with token 1 (BOS) and stops when it is sampled again.
    if (c.vocab_size < 2) throw bad("the vocabulary has no token 1 (BOS), which every sequence starts with");
    return c;
}

// Version 2's group size: export.py checks only that it divides dim, and runq.c silently drops the tail
// of every row whose length it does not divide (the rows of w2 are hidden_dim long).
void check_group_size(const std::string& path, const Config& c) {
    const int gs = c.weight_format.group_size;
    const auto bad = [&](const std::string& why) {
        return Error(path + ": not a valid llama2.c checkpoint: version 2's group size " + std::to_string(gs) + " " +
                     why + " (header: " + describe(c) + "); quantize the fp32 model again (llama-cl quantize IN OUT: "
                     "its default group size divides dim and hidden_dim)");
    };
    if (gs <= 0) throw bad("must be positive");
    if (c.dim % gs != 0) throw bad("does not divide dim");
    if (c.hidden_dim % gs != 0)
        throw bad("does not divide hidden_dim, so runq.c would drop the last " + std::to_string(c.hidden_dim % gs) +
                  " weights of every w2 row");
}

}  // namespace

ModelSize::ModelSize(const Config& c) {
    const TensorCounts t = tensor_counts(c);
    const std::uint64_t L = c.n_layers;
    layer_params = (t.rms_att + t.wq + t.wk + t.wv + t.wo + t.rms_ffn + t.w1 + t.w2 + t.w3) / L;
    embedding_params = t.embedding;
    classifier_params = t.classifier;
    total_params = layer_params * L + embedding_params + classifier_params + t.rms_final;
    kv_cache_bytes = 2 * L * static_cast<std::uint64_t>(c.seq_len) * c.kv_dim() * sizeof(float);
    // run.c's RunState without the cache: x, xb, xb2, q (dim each), k, v (kv_dim), hb, hb2 (hidden_dim),
    // att (n_heads x seq_len) and logits (vocab).
    const std::uint64_t floats = 4ull * c.dim + 2ull * c.kv_dim() + 2ull * c.hidden_dim +
                                 static_cast<std::uint64_t>(c.n_heads) * c.seq_len + c.vocab_size;
    reference_activation_bytes = floats * sizeof(float);
    const WeightFormat& format = c.weight_format;
    layer_bytes_ = (t.rms_att + t.rms_ffn) / L * sizeof(float) + format.bytes((t.wq + t.wk + t.wv + t.wo + t.w1 + t.w2 + t.w3) / L);
    embedding_bytes_ = c.classifier_format().bytes(t.embedding);
    weight_bytes_ = layer_bytes_ * L + t.rms_final * sizeof(float) + c.classifier_format().bytes(t.embedding + t.classifier);
}

struct Checkpoint::Storage {
    std::optional<MappedFile> file;  // the mapped file, or
    std::optional<HostBytes> image;  // an in-memory file image
    // Q8_0 scales that follow a count of int8 values not a multiple of 4 (group sizes 1 and 2), copied to
    // aligned floats at load. A list: its elements never move.
    std::list<std::vector<float>> aligned_scales;
    // The embedding table in fp32 when stored in another format, made at its first use.
    std::once_flag widened;
    std::vector<float> token_embedding;
    const std::byte* data() const { return file ? file->data() : image->data(); }
    std::uint64_t size() const { return file ? file->size() : image->size(); }
};

Checkpoint Checkpoint::open(const std::string& path) {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it has no
    // effect on the regular files we go on to map.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw Error(path + ": cannot open checkpoint: " + std::strerror(errno));
    auto storage = std::make_shared<Storage>();
    bool gguf = false;
    try {
        struct stat st {};
        if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
            throw Error(path + ": not a regular file; pass a model file (a llama2.c .bin or a .gguf)");
        // /proc and /sys files call themselves regular with a size of 0 and still have content to read.
        char byte = 0;
        if (st.st_size == 0 && ::read(fd, &byte, 1) == 1)
            throw Error(path + ": a file that reports no size (a /proc or /sys file?), not a llama2.c checkpoint; "
                        "pass a checkpoint (.bin)");
        std::byte head[4] = {};
        gguf = ::pread(fd, head, sizeof head, 0) == sizeof head && GgufFile::has_magic(head);
        if (!gguf) storage->file.emplace(fd, static_cast<std::size_t>(st.st_size), path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);  // the mapping keeps the file alive
    if (gguf) return read_gguf_model(GgufFile::open(path));

    Checkpoint ck;
    ck.storage_ = std::move(storage);
    ck.path_ = path;
    ck.map_tensors(ck.storage_->data(), ck.storage_->size());
    return ck;
}

Checkpoint Checkpoint::from_image(HostBytes image, const std::string& name) {
    Checkpoint ck;
    ck.storage_ = std::make_shared<Storage>();
    ck.storage_->image = std::move(image);
    ck.path_ = name;
    ck.map_tensors(ck.storage_->data(), ck.storage_->size());
    return ck;
}

Checkpoint Checkpoint::from_tensors(const Config& config, HostBytes tensors, const std::string& name, int version,
                                    ModelFile file, std::string load_note) {
    Checkpoint ck;
    ck.file_ = file;
    ck.load_note_ = std::move(load_note);
    ck.storage_ = std::make_shared<Storage>();
    ck.storage_->image = std::move(tensors);
    ck.path_ = name;
    ck.config_ = config;
    ck.version_ = version;
    bool overflow = false;
    if (tensor_bytes(config, false, overflow) != ck.storage_->image->size() || overflow)
        throw std::logic_error("Checkpoint::from_tensors: the tensors do not match the config");
    ck.map_weights(ck.storage_->data(), false);
    return ck;
}

void Checkpoint::map_tensors(const std::byte* base, std::uint64_t size) {
    const std::string& path = path_;
    if (size < kV0HeaderBytes)
        throw Error(path + ": truncated checkpoint: " + std::to_string(size) +
                    " bytes is smaller than the 28-byte llama2.c header");
    bool legacy = true;
    try {
        std::uint32_t magic = 0;
        std::memcpy(&magic, base, sizeof magic);
        std::int32_t header[7];
        if (magic == kMagicAk42) {
            std::int32_t version = 0;
            if (size < kV1HeaderBytes)
                throw Error(path + ": truncated checkpoint: the versioned header needs 256 bytes, the file has " +
                            std::to_string(size));
            std::memcpy(&version, base + 4, sizeof version);
            if (version != 1 && version != 2)
                throw Error(path + ": unknown llama2.c checkpoint version " + std::to_string(version) +
                            " in its ak42 header (supported: versions 1 and 2 there, or the legacy format without a "
                            "header)");
            std::memcpy(header, base + 8, sizeof header);
            legacy = false;
            version_ = version;
        } else {
            std::memcpy(header, base, sizeof header);
            version_ = 0;
        }
        config_ = parse_config(path, header, legacy);
        if (!legacy) {
            const std::uint8_t shared = static_cast<std::uint8_t>(base[8 + sizeof header]);
            if (shared > 1)
                throw Error(path + ": not a valid llama2.c checkpoint: shared-classifier flag is " +
                            std::to_string(shared) + ", expected 0 or 1" + kReexport);
            config_.shared_classifier = shared == 1;
        }
        if (version_ == 2) {
            // The group size follows the flag byte, unaligned (export.py packs the header).
            std::int32_t group_size = 0;
            std::memcpy(&group_size, base + 8 + sizeof header + 1, sizeof group_size);
            config_.weight_format = {ElementType::q8_0, group_size};
            check_group_size(path, config_);
        }

        bool overflow = false;
        const std::uint64_t expected =
            add(legacy ? kV0HeaderBytes : kV1HeaderBytes, tensor_bytes(config_, legacy, overflow), overflow);
        if (overflow || memory_sizes_overflow(config_))
            throw Error(path + ": not a valid llama2.c checkpoint: the header's dimensions overflow 64-bit sizes (" +
                        describe(config_) + ")" + kReexport);
        if (expected != size)
            throw Error(path + ": checkpoint size mismatch: the header (" + describe(config_) + ", version " +
                        std::to_string(version_) + ") needs " + std::to_string(expected) +
                        " bytes but the file has " + std::to_string(size) +
                        (size < expected ? " (truncated download?)" : ""));
    } catch (const Error&) {
        // Only a file that is not a valid checkpoint is checked for other formats, so no checkpoint can
        // ever be mistaken for one.
        if (const std::string what = foreign_format(base, size); !what.empty())
            throw Error(path + ": this is " + what + ", not a llama2.c checkpoint or a GGUF file; convert the "
                        "model with llama.cpp's convert_hf_to_gguf.py (or llama2.c's export.py), or download it again");
        throw;
    }
    map_weights(base + (legacy ? kV0HeaderBytes : kV1HeaderBytes), legacy);
}

void Checkpoint::map_weights(const std::byte* p, bool legacy) {
    const Config& c = config_;
    const WeightFormat norm{}, matrix = c.weight_format, table = c.classifier_format();
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    const std::uint64_t layers = static_cast<std::uint64_t>(c.n_layers);
    // Tensors are laid out back to back; walk them in file order. A Q8_0 tensor is its int8 values, then
    // one fp32 scale per group; scales that a count of values not a multiple of 4 (group sizes 1 and 2)
    // leaves unaligned are copied to aligned floats at load.
    const auto take_run = [&](const WeightFormat& t, std::uint64_t n, std::uint64_t count) {
        TensorRun run{WeightTensor{t, p, nullptr}, t.bytes(n), 0};
        if (t.type == ElementType::q8_0) {
            const std::byte* scales = p + n;
            const std::uint64_t groups = n / static_cast<std::uint64_t>(t.group_size);
            run.scale_stride = run.stride;
            if (reinterpret_cast<std::uintptr_t>(scales) % alignof(float) != 0 || run.stride % alignof(float) != 0) {
                std::vector<float>& copy = storage_->aligned_scales.emplace_back(groups * count);
                for (std::uint64_t i = 0; i < count; ++i)
                    std::memcpy(copy.data() + i * groups, scales + i * run.stride, groups * sizeof(float));
                scales = reinterpret_cast<const std::byte*>(copy.data());
                run.scale_stride = groups * sizeof(float);
            }
            run.first.scales = reinterpret_cast<const float*>(scales);
        }
        p += count * run.stride;
        return run;
    };
    const auto take = [&](const WeightFormat& t, std::uint64_t n) { return take_run(t, n, 1).first; };
    layer_tensors_.clear();
    const auto each_layer = [&](WeightTensor LayerWeights::*tensor, const WeightFormat& t, std::uint64_t n) {
        layer_tensors_.emplace_back(tensor, take_run(t, n, layers));
    };
    if (legacy) {
        embedding_ = take(table, vocab * dim);
        each_layer(&LayerWeights::rms_att, norm, dim);
        each_layer(&LayerWeights::wq, matrix, dim * dim);
        each_layer(&LayerWeights::wk, matrix, kv * dim);
        each_layer(&LayerWeights::wv, matrix, kv * dim);
        each_layer(&LayerWeights::wo, matrix, dim * dim);
        each_layer(&LayerWeights::rms_ffn, norm, dim);
        each_layer(&LayerWeights::w1, matrix, hidden * dim);
        each_layer(&LayerWeights::w2, matrix, dim * hidden);
        each_layer(&LayerWeights::w3, matrix, hidden * dim);
        rms_final_ = take(norm, dim).f32();
        take(norm, tensor_counts(c).freq_cis);  // RoPE's real and imaginary halves: seq_len x head_size/2 each
    } else {
        each_layer(&LayerWeights::rms_att, norm, dim);
        each_layer(&LayerWeights::rms_ffn, norm, dim);
        rms_final_ = take(norm, dim).f32();
        embedding_ = take(table, vocab * dim);
        each_layer(&LayerWeights::wq, matrix, dim * dim);
        each_layer(&LayerWeights::wk, matrix, kv * dim);
        each_layer(&LayerWeights::wv, matrix, kv * dim);
        each_layer(&LayerWeights::wo, matrix, dim * dim);
        each_layer(&LayerWeights::w1, matrix, hidden * dim);
        each_layer(&LayerWeights::w2, matrix, dim * hidden);
        each_layer(&LayerWeights::w3, matrix, hidden * dim);
    }
    classifier_ = c.shared_classifier ? embedding_ : take(table, vocab * dim);
}

WeightTensor Checkpoint::TensorRun::at(std::uint64_t i) const {
    WeightTensor t = first;
    t.values = static_cast<const std::byte*>(first.values) + i * stride;
    if (first.scales)
        t.scales = reinterpret_cast<const float*>(reinterpret_cast<const std::byte*>(first.scales) + i * scale_stride);
    return t;
}

LayerWeights Checkpoint::layer(int l) const {
    LayerWeights w;
    for (const auto& [tensor, run] : layer_tensors_) w.*tensor = run.at(static_cast<std::uint64_t>(l));
    return w;
}

const float* Checkpoint::token_embedding() const {
    if (embedding_.format.type == ElementType::f32) return embedding_.f32();
    std::call_once(storage_->widened, [this] {
        const std::uint64_t n = static_cast<std::uint64_t>(config_.vocab_size) * static_cast<std::uint64_t>(config_.dim);
        storage_->token_embedding.resize(n);
        dequantize(storage_->token_embedding.data(), embedding_, n);
    });
    return storage_->token_embedding.data();
}

}  // namespace llamacl
