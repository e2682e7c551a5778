#include "llamacl/export.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/progress.hpp"

namespace llamacl {

namespace {

constexpr std::uint32_t kMagicAk42 = 0x616b3432;
constexpr std::size_t kHeaderBytes = 256;

// Calls f(weights, count, quantized) for every tensor of an fp32 checkpoint in export order (versions 1
// and 2): the norms, kept in fp32, then the embedding table, each family of layer matrices, and the
// classifier when it is not shared.
template <typename F>
void for_each_export_tensor(const Checkpoint& ck, F f) {
    const Config& c = ck.config();
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    const auto each_layer = [&](WeightTensor LayerWeights::*tensor, std::uint64_t n, bool quantized) {
        for (int l = 0; l < c.n_layers; ++l) f((ck.layer(l).*tensor).f32(), n, quantized);
    };
    each_layer(&LayerWeights::rms_att, dim, false);
    each_layer(&LayerWeights::rms_ffn, dim, false);
    f(ck.rms_final(), dim, false);
    f(ck.embedding_weights().f32(), vocab * dim, true);
    each_layer(&LayerWeights::wq, dim * dim, true);
    each_layer(&LayerWeights::wk, kv * dim, true);
    each_layer(&LayerWeights::wv, kv * dim, true);
    each_layer(&LayerWeights::wo, dim * dim, true);
    each_layer(&LayerWeights::w1, hidden * dim, true);
    each_layer(&LayerWeights::w2, dim * hidden, true);
    each_layer(&LayerWeights::w3, hidden * dim, true);
    if (!c.shared_classifier) f(ck.classifier().f32(), vocab * dim, true);
}

// Weights [begin, end) of the n at w (whole groups) stored as encode_weights stores all n.
void encode_range(std::byte* out, const float* w, std::uint64_t n, std::uint64_t begin, std::uint64_t end,
                  const WeightFormat& format) {
    switch (format.type) {
        case ElementType::f32:
            std::memcpy(out + begin * sizeof(float), w + begin, (end - begin) * sizeof(float));
            return;
        case ElementType::f16:
            for (std::uint64_t i = begin; i < end; ++i) {
                const std::uint16_t half = float_to_half(w[i]);
                std::memcpy(out + i * sizeof half, &half, sizeof half);
            }
            return;
        case ElementType::q8_0: {
            // (The scales go through a vector: out + n need not be aligned to a float.)
            const std::uint64_t gs = static_cast<std::uint64_t>(format.group_size);
            std::vector<float> scales((end - begin) / gs);
            quantize_q80(reinterpret_cast<std::int8_t*>(out) + begin, scales.data(), w + begin, end - begin,
                         format.group_size);
            std::memcpy(out + n + begin / gs * sizeof(float), scales.data(), scales.size() * sizeof(float));
            return;
        }
    }
}

}  // namespace

void encode_weights(std::byte* out, const float* w, std::uint64_t n, const WeightFormat& format) {
    // In slices of whole groups (a group's scale is its own, so slices are independent), one thread per
    // usable CPU taking the next slice.
    constexpr std::uint64_t kSliceWeights = 1u << 22;
    const std::uint64_t gs = format.type == ElementType::q8_0 ? static_cast<std::uint64_t>(format.group_size) : 1;
    const std::uint64_t slice = std::max(gs, kSliceWeights / gs * gs), slices = (n + slice - 1) / slice;
    const auto threads = static_cast<unsigned>(std::min<std::uint64_t>(slices, static_cast<unsigned>(usable_cpus())));
    if (threads <= 1) {
        encode_range(out, w, n, 0, n, format);
        return;
    }
    std::atomic<std::uint64_t> next{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t)
        workers.emplace_back([&] {
            for (std::uint64_t s = next++; s < slices; s = next++)
                encode_range(out, w, n, s * slice, std::min(n, (s + 1) * slice), format);
        });
    for (std::thread& worker : workers) worker.join();
}

namespace {

void require_fp32(const Checkpoint& ck, const std::string& what) {
    if (ck.weight_format().type != ElementType::f32)
        throw usage_error(what + ": " + ck.path() + " holds " + ck.weight_format().describe() +
                          " weights (llama2.c version " + std::to_string(ck.version()) +
                          "); only an fp32 checkpoint (version 0 or 1) converts");
}

std::uint64_t fp32_bytes(const Checkpoint& ck) {
    std::uint64_t total = 0;
    for_each_export_tensor(ck, [&](const float*, std::uint64_t n, bool) { total += n * sizeof(float); });
    return total;
}

}  // namespace

int default_group_size(const Config& c) {
    int gs = 64;
    while (c.dim % gs != 0 || c.hidden_dim % gs != 0) gs /= 2;
    return gs;
}

void check_group_size_flag(const Config& c, int group_size, const std::string& path) {
    if (group_size > 0 && c.dim % group_size == 0 && c.hidden_dim % group_size == 0) return;
    throw usage_error("--group-size " + std::to_string(group_size) + ": must divide both dim (" +
                      std::to_string(c.dim) + ") and hidden_dim (" + std::to_string(c.hidden_dim) + ") of " + path +
                      ", as every row is quantized in whole groups; " + std::to_string(default_group_size(c)) +
                      " does");
}

void quantize_q80(std::int8_t* q, float* scales, const float* w, std::uint64_t n, int group_size) {
    const std::uint64_t gs = static_cast<std::uint64_t>(group_size);
    for (std::uint64_t group = 0; group < n / gs; ++group) {
        const float* wg = w + group * gs;
        float wmax = 0.0f;
        for (std::uint64_t i = 0; i < gs; ++i) wmax = std::max(wmax, std::fabs(wg[i]));
        const float scale = wmax / 127.0f;
        scales[group] = scale;
        // nearbyint rounds in the default mode, to nearest with halves to even, as torch.round does.
        for (std::uint64_t i = 0; i < gs; ++i) {
            const float quant = wg[i] / scale;
            q[group * gs + i] = std::isnan(quant) ? std::int8_t{0} : static_cast<std::int8_t>(std::nearbyint(quant));
        }
    }
}

std::uint16_t float_to_half(float f) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    const std::uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN stays NaN
    if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
    if (magnitude < 0x38800000u) {
        // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded to even; 1024 of them is
        // that smallest normal, whose encoding is the same number.
        float value = 0.0f;
        std::memcpy(&value, &magnitude, sizeof value);
        return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(value * 0x1p24f)));
    }
    // Rebias the exponent (127 -> 15) and drop 13 mantissa bits, to nearest even; a carry into the
    // exponent is the correct next power of two.
    std::uint32_t half = (magnitude - 0x38000000u) >> 13;
    const std::uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;
    return static_cast<std::uint16_t>(sign | half);
}

void write_version2(const Checkpoint& fp32, const std::string& path, int group_size,
                    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
    require_fp32(fp32, "quantize");
    const Config& c = fp32.config();
    check_group_size_flag(c, group_size, fp32.path());
    const WeightFormat q80{ElementType::q8_0, group_size};
    // The output replaces `path` by a rename: never the input itself, nor a device or directory.
    struct stat target {}, input {};
    if (::stat(path.c_str(), &target) == 0) {
        if (!S_ISREG(target.st_mode))
            throw Error(path + ": exists and is not a regular file; give quantize a file path to write");
        if (::stat(fp32.path().c_str(), &input) == 0 && target.st_dev == input.st_dev && target.st_ino == input.st_ino)
            throw Error(path + ": is the input checkpoint; give quantize another output path");
    }

    // A new file of its own (O_EXCL): never the input, an existing file, nor what a link there points to.
    std::string partial = path + ".partial.XXXXXX";
    const int fd = ::mkstemp(partial.data());
    if (fd < 0) throw Error(path + ": cannot create the quantized checkpoint: " + std::strerror(errno));
    const mode_t mask = ::umask(0);  // mkstemp's 0600 becomes what creat(2) would have given
    ::umask(mask);
    std::FILE* out = ::fchmod(fd, 0666 & ~mask) == 0 ? ::fdopen(fd, "wb") : nullptr;
    if (!out) {
        const int err = errno;
        ::close(fd);
        std::remove(partial.c_str());
        throw Error(path + ": cannot create the quantized checkpoint: " + std::strerror(err));
    }
    const auto write_failed = [&] {
        return Error(path + ": cannot write the quantized checkpoint: " + std::strerror(errno));
    };
    const auto write = [&](const void* data, std::size_t bytes) {
        if (std::fwrite(data, 1, bytes, out) != bytes) throw write_failed();
    };
    try {
        // The header: magic, version, the seven dimensions (vocab_size positive), the shared-classifier
        // byte, the group size (unaligned, packed after the byte), zeros up to 256 bytes.
        std::vector<std::byte> header(kHeaderBytes);
        const std::int32_t fields[8] = {2, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len};
        std::memcpy(header.data(), &kMagicAk42, 4);
        std::memcpy(header.data() + 4, fields, 8 * sizeof(std::int32_t));
        header[36] = std::byte{c.shared_classifier ? std::uint8_t{1} : std::uint8_t{0}};
        std::memcpy(header.data() + 37, &group_size, sizeof group_size);
        write(header.data(), header.size());

        const std::uint64_t total = fp32_bytes(fp32);
        std::uint64_t done = 0;
        std::vector<std::byte> encoded;
        for_each_export_tensor(fp32, [&](const float* w, std::uint64_t n, bool quantized) {
            const WeightFormat as = quantized ? q80 : WeightFormat{};
            encoded.resize(as.bytes(n));
            encode_weights(encoded.data(), w, n, as);
            write(encoded.data(), encoded.size());
            done += n * sizeof(float);
            if (progress) progress(done, total);
        });
        if (std::fflush(out) != 0 || ::fsync(::fileno(out)) != 0) throw write_failed();
    } catch (...) {  // what could not be finished is removed, whatever stopped it
        std::fclose(out);
        std::remove(partial.c_str());
        throw;
    }
    if (std::fclose(out) != 0) {
        const int err = errno;
        std::remove(partial.c_str());
        throw Error(path + ": cannot write the quantized checkpoint: " + std::strerror(err));
    }
    if (std::rename(partial.c_str(), path.c_str()) != 0) {
        const int err = errno;
        std::remove(partial.c_str());
        throw Error(path + ": cannot create the quantized checkpoint: " + std::strerror(err));
    }
}

Checkpoint with_weights(Checkpoint ck, std::optional<ElementType> type) {
    if (!type || *type == ck.weight_format().type) return ck;
    const std::string flag = std::string("--weights ") + element_name(*type);
    require_fp32(ck, flag);
    Config c = ck.config();
    c.weight_format = {*type, *type == ElementType::q8_0 ? default_group_size(c) : 0};
    std::uint64_t bytes = 0;
    for_each_export_tensor(ck, [&](const float*, std::uint64_t n, bool quantized) {
        bytes += (quantized ? c.weight_format : WeightFormat{}).bytes(n);
    });
    const ProgressLine progress("converting " + std::to_string(fp32_bytes(ck) >> 20) + " MiB of fp32 weights to " +
                               element_name(*type));
    HostBytes tensors(bytes);
    std::byte* at = tensors.data();
    for_each_export_tensor(ck, [&](const float* w, std::uint64_t n, bool quantized) {
        const WeightFormat as = quantized ? c.weight_format : WeightFormat{};
        encode_weights(at, w, n, as);
        at += as.bytes(n);
    });
    return Checkpoint::from_tensors(c, std::move(tensors), ck.path() + " (" + flag + ")", ck.version());
}

}  // namespace llamacl
