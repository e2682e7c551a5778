#include "llamacl/synthetic.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "llamacl/error.hpp"

namespace llamacl {

namespace {

// A file cut short by a failed write must not pass for a model: it is removed, when it is a regular file
// (the path may name a device such as /dev/full).
Error write_failed(const std::string& path, int error) {
    struct stat st {};
    const bool removed = ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::unlink(path.c_str()) == 0;
    return Error(path + ": write failed: " + std::strerror(error) + (removed ? " (the partial file is removed)" : ""));
}

// splitmix64: a fast, well-mixed generator; one independent stream per (seed, tensor, block).
std::uint64_t splitmix64(std::uint64_t& state) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// One tensor family of the file (all layers together): how many floats and how to draw them.
struct TensorSpec {
    int kind;  // which tensor family; seeds its stream, so v0 and v1 files of one seed hold the same weights
    std::uint64_t floats;
    float center;  // values are center + scale * uniform(-1, 1)
    float scale;
};

// File order of the tensors for each version; mirrors Checkpoint::map_tensors.
std::vector<TensorSpec> tensor_layout(const Config& c, int version) {
    const std::uint64_t L = c.n_layers, dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim();
    const std::uint64_t vocab = c.vocab_size;
    // Matrices scaled by 1/sqrt(fan_in) keep activations O(1) through the layers; norms near 1.
    const float in_dim = 1.0f / std::sqrt(static_cast<float>(dim));
    const float in_hidden = 1.0f / std::sqrt(static_cast<float>(hidden));
    const TensorSpec rms_att{0, L * dim, 1.0f, 0.1f}, rms_ffn{1, L * dim, 1.0f, 0.1f}, rms_final{2, dim, 1.0f, 0.1f};
    // Small embeddings: with a shared classifier, large ones would make every token predict itself.
    const TensorSpec embedding{3, vocab * dim, 0.0f, 0.1f};
    const TensorSpec wq{4, L * dim * dim, 0.0f, in_dim}, wk{5, L * kv * dim, 0.0f, in_dim};
    const TensorSpec wv{6, L * kv * dim, 0.0f, in_dim}, wo{7, L * dim * dim, 0.0f, in_dim};
    const TensorSpec w1{8, L * hidden * dim, 0.0f, in_dim}, w2{9, L * dim * hidden, 0.0f, in_hidden};
    const TensorSpec w3{10, L * hidden * dim, 0.0f, in_dim};
    const TensorSpec classifier{11, c.shared_classifier ? 0 : vocab * dim, 0.0f, in_dim};
    if (version == 0) {
        const TensorSpec freq_cis{12, static_cast<std::uint64_t>(c.seq_len) * c.head_size(), 0.0f, 0.0f};
        return {embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, classifier};
    }
    return {rms_att, rms_ffn, rms_final, embedding, wq, wk, wv, wo, w1, w2, w3, classifier};
}

std::vector<std::byte> header_bytes(const Config& c, int version) {
    const std::int32_t vocab = c.shared_classifier || version != 0 ? c.vocab_size : -c.vocab_size;
    const std::int32_t fields[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, vocab, c.seq_len};
    std::vector<std::byte> h(version == 0 ? sizeof fields : 256, std::byte{0});
    std::byte* p = h.data();
    if (version != 0) {
        const std::uint32_t magic = 0x616b3432;
        const std::int32_t v = 1;
        std::memcpy(p, &magic, 4);
        std::memcpy(p + 4, &v, 4);
        p += 8;
    }
    std::memcpy(p, fields, sizeof fields);
    if (version != 0) p[sizeof fields] = std::byte{static_cast<unsigned char>(c.shared_classifier)};
    return h;
}

constexpr std::uint64_t kBlockFloats = 1u << 20;

// Fills out[0..n) with floats [first, first+n) of tensor t. Blocks of kBlockFloats have their own
// stream, so any split of the work produces the same bytes.
void fill(float* out, std::uint64_t first, std::uint64_t n, const TensorSpec& t, std::uint64_t seed) {
    std::uint64_t i = first;
    while (i < first + n) {
        const std::uint64_t block = i / kBlockFloats, end = std::min(first + n, (block + 1) * kBlockFloats);
        std::uint64_t state = seed ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(t.kind + 1)) ^ (0x8CB92BA72F3D8DD7ull * (block + 1));
        for (std::uint64_t skip = i - block * kBlockFloats; skip > 0; --skip) splitmix64(state);
        for (; i < end; ++i) {
            const float u = static_cast<float>(splitmix64(state) >> 40) * (1.0f / 16777216.0f);  // [0,1)
            out[i - first] = t.center + t.scale * (2.0f * u - 1.0f);
        }
    }
}

// Calls emit(byte offset in file, data, bytes) for consecutive pieces of the whole file, generated in
// parallel by `threads` workers over pieces of at most `piece_floats` floats.
template <typename Emit>
void generate(const Config& c, int version, std::uint64_t seed, unsigned threads, Emit&& emit) {
    const std::vector<std::byte> header = header_bytes(c, version);
    emit(0, header.data(), header.size());
    struct Piece {
        std::size_t tensor;
        std::uint64_t first, n, file_offset;
    };
    std::vector<Piece> pieces;
    std::uint64_t offset = header.size();
    const std::vector<TensorSpec> layout = tensor_layout(c, version);
    for (std::size_t t = 0; t < layout.size(); ++t) {
        for (std::uint64_t first = 0; first < layout[t].floats; first += 4 * kBlockFloats) {
            const std::uint64_t n = std::min<std::uint64_t>(4 * kBlockFloats, layout[t].floats - first);
            pieces.push_back({t, first, n, offset});
            offset += n * sizeof(float);
        }
    }
    if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
    threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(1, pieces.size())));
    std::vector<std::thread> workers;
    for (unsigned w = 0; w < threads; ++w) {
        workers.emplace_back([&, w] {
            std::vector<float> buffer(4 * kBlockFloats);
            for (std::size_t p = w; p < pieces.size(); p += threads) {
                const Piece& piece = pieces[p];
                fill(buffer.data(), piece.first, piece.n, layout[piece.tensor], seed);
                emit(piece.file_offset, reinterpret_cast<const std::byte*>(buffer.data()), piece.n * sizeof(float));
            }
        });
    }
    for (auto& worker : workers) worker.join();
}

void check_config(const Config& c) {
    if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
        c.vocab_size < 2 || c.seq_len <= 0 || c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 ||
        c.head_size() % 2 != 0)
        throw usage_error("invalid model shape: dimensions must be positive, the vocabulary at least 2 (BOS is "
                          "token 1), dim divisible by n_heads, n_heads by n_kv_heads, and the head size even");
    // The file's size in bytes must fit 64 bits (the sizes below are summed in checkpoint_file_bytes).
    const std::uint64_t L = c.n_layers, dim = c.dim, hidden = c.hidden_dim, vocab = c.vocab_size;
    std::uint64_t per_layer = 0, total = 0;
    const bool overflow =
        __builtin_mul_overflow(dim, dim, &per_layer) || __builtin_mul_overflow(per_layer, 4, &per_layer) ||
        __builtin_mul_overflow(hidden, dim, &total) || __builtin_mul_overflow(total, 3, &total) ||
        __builtin_add_overflow(per_layer, total, &per_layer) || __builtin_mul_overflow(per_layer, L, &total) ||
        __builtin_mul_overflow(vocab, dim, &per_layer) || __builtin_mul_overflow(per_layer, 2, &per_layer) ||
        __builtin_add_overflow(total, per_layer, &total) ||
        __builtin_mul_overflow(static_cast<std::uint64_t>(c.seq_len), dim, &per_layer) ||
        __builtin_add_overflow(total, per_layer, &total) || __builtin_mul_overflow(total, 4, &total) ||
        total > (std::uint64_t{1} << 60);
    if (overflow) throw usage_error("invalid model shape: the checkpoint would be larger than 2^60 bytes");
}

}  // namespace

std::optional<Config> preset_config(const std::string& name) {
    // dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len, shared classifier
    if (name == "tiny") return Config{32, 72, 2, 4, 2, 320, 64, true};
    if (name == "stories15M") return Config{288, 768, 6, 6, 6, 32000, 256, true};
    if (name == "stories110M") return Config{768, 2048, 12, 12, 12, 32000, 1024, true};
    if (name == "llama3.2-1b") return Config{2048, 8192, 16, 32, 8, 128256, 2048, true};
    if (name == "llama2-7b") return Config{4096, 11008, 32, 32, 32, 32000, 2048, false};
    return std::nullopt;
}

std::vector<std::string> preset_names() { return {"tiny", "stories15M", "stories110M", "llama3.2-1b", "llama2-7b"}; }

std::uint64_t checkpoint_file_bytes(const Config& c, int version) {
    std::uint64_t floats = 0;
    for (const TensorSpec& t : tensor_layout(c, version)) floats += t.floats;
    return header_bytes(c, version).size() + floats * sizeof(float);
}

HostBytes synthetic_checkpoint_image(const Config& c, int version, std::uint64_t seed) {
    check_config(c);
    HostBytes image(checkpoint_file_bytes(c, version));
    generate(c, version, seed, 0, [&](std::uint64_t offset, const std::byte* data, std::uint64_t bytes) {
        std::memcpy(image.data() + offset, data, bytes);
    });
    return image;
}

void write_synthetic_checkpoint(const std::string& path, const Config& c, int version, std::uint64_t seed,
                                unsigned threads) {
    check_config(c);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw Error(path + ": cannot create: " + std::strerror(errno));
    std::atomic<int> write_error{0};
    generate(c, version, seed, threads, [&](std::uint64_t offset, const std::byte* data, std::uint64_t bytes) {
        while (bytes > 0) {  // pwrite lets every worker write its own piece without a shared file position
            const ssize_t n = ::pwrite(fd, data, bytes, static_cast<off_t>(offset));
            if (n <= 0) {
                write_error = n < 0 ? errno : EIO;
                return;
            }
            data += n;
            offset += static_cast<std::uint64_t>(n);
            bytes -= static_cast<std::uint64_t>(n);
        }
    });
    const int close_result = ::close(fd);
    if (write_error != 0 || close_result != 0) throw write_failed(path, write_error != 0 ? write_error.load() : errno);
}

void write_synthetic_tokenizer(const std::string& path, int vocab_size) {
    if (vocab_size < kMinSyntheticVocab)
        throw usage_error("a synthetic tokenizer needs at least " + std::to_string(kMinSyntheticVocab) + " entries");
    std::vector<std::string> pieces = {"<unk>", "\n<s>\n", "\n</s>\n"};
    char hex[8];
    for (int b = 0; b < 256; ++b) {
        std::snprintf(hex, sizeof hex, "<0x%02X>", b);
        pieces.emplace_back(hex);
    }
    for (char ch = ' '; ch <= '~'; ++ch) pieces.emplace_back(1, ch);
    const std::string letters = " etaoinshrdlucmwfgypbvkjxqz";
    for (char a : letters)
        for (char b : letters) pieces.push_back(std::string{a, b});
    pieces.resize(static_cast<std::size_t>(vocab_size), "");
    // Unused tail entries get unique names so every piece is distinct.
    for (std::size_t i = 0; i < pieces.size(); ++i)
        if (pieces[i].empty()) pieces[i] = "<extra" + std::to_string(i) + ">";

    std::ofstream out(path, std::ios::binary);
    if (!out) throw Error(path + ": cannot create: " + std::strerror(errno));
    std::int32_t max_len = 0;
    for (const std::string& p : pieces) max_len = std::max<std::int32_t>(max_len, static_cast<std::int32_t>(p.size()));
    out.write(reinterpret_cast<const char*>(&max_len), sizeof max_len);
    for (std::size_t i = 0; i < pieces.size(); ++i) {
        // Longer merges score higher, earlier ones higher within a length, like a trained BPE vocabulary.
        const float score = i < 259 ? 0.0f : static_cast<float>(pieces[i].size()) * 1000.0f - static_cast<float>(i);
        const std::int32_t len = static_cast<std::int32_t>(pieces[i].size());
        out.write(reinterpret_cast<const char*>(&score), sizeof score);
        out.write(reinterpret_cast<const char*>(&len), sizeof len);
        out.write(pieces[i].data(), len);
    }
    out.close();
    if (!out) throw write_failed(path, errno ? errno : EIO);
}

}  // namespace llamacl
