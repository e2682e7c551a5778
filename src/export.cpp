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

#include "llamacl/atomic_file.hpp"
#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/number_text.hpp"
#include "llamacl/progress.hpp"

namespace llamacl {

namespace {

constexpr std::uint32_t kMagicAk42 = 0x616b3432;
constexpr std::size_t kHeaderBytes = 256;

// Calls f(name, weights, count, quantized) for every tensor of an fp32 or f16 checkpoint in export order
// (versions 1 and 2): the norms, kept in fp32, then the embedding table, each family of layer matrices,
// and the classifier when it is not shared, halves widened (exactly) as f reads them. Names are run.c's
// fields ("wq of layer 0").
template <typename F>
void for_each_export_tensor(const Checkpoint& ck, F f) {
    const Config& c = ck.config();
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    std::vector<float> widened;
    const auto floats = [&](const WeightTensor& t, std::uint64_t n) {
        if (t.format.type == ElementType::f32) return t.f32();
        widened.resize(n);
        dequantize(widened.data(), t, n);
        return static_cast<const float*>(widened.data());
    };
    const auto each_layer = [&](const char* name, WeightTensor LayerWeights::*tensor, std::uint64_t n, bool quantized) {
        for (int l = 0; l < c.n_layers; ++l)
            f(std::string(name) + " of layer " + std::to_string(l), floats(ck.layer(l).*tensor, n), n, quantized);
    };
    each_layer("rms_att_weight", &LayerWeights::rms_att, dim, false);
    each_layer("rms_ffn_weight", &LayerWeights::rms_ffn, dim, false);
    f("rms_final_weight", ck.rms_final(), dim, false);
    f("token_embedding_table", floats(ck.embedding_weights(), vocab * dim), vocab * dim, true);
    each_layer("wq", &LayerWeights::wq, dim * dim, true);
    each_layer("wk", &LayerWeights::wk, kv * dim, true);
    each_layer("wv", &LayerWeights::wv, kv * dim, true);
    each_layer("wo", &LayerWeights::wo, dim * dim, true);
    each_layer("w1", &LayerWeights::w1, hidden * dim, true);
    each_layer("w2", &LayerWeights::w2, dim * hidden, true);
    each_layer("w3", &LayerWeights::w3, hidden * dim, true);
    if (!c.shared_classifier) f("wcls", floats(ck.classifier(), vocab * dim), vocab * dim, true);
}

// ggml's Q4_0 blocks for weights [begin, end) (whole blocks) of `w`, at out's block begin / 32.
void encode_q4_0_range(std::byte* out, const float* w, std::uint64_t begin, std::uint64_t end) {
    for (std::uint64_t block = begin / 32; block < end / 32; ++block) {
        const float* x = w + block * 32;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 32; ++j)
            if (amax < std::fabs(x[j])) {
                amax = std::fabs(x[j]);
                max = x[j];
            }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        std::byte* y = out + block * 18;
        const std::uint16_t half = float_to_half(d);
        std::memcpy(y, &half, sizeof half);
        for (int j = 0; j < 16; ++j) {
            const auto q0 = std::min<std::int8_t>(15, static_cast<std::int8_t>(x[j] * id + 8.5f));
            const auto q1 = std::min<std::int8_t>(15, static_cast<std::int8_t>(x[j + 16] * id + 8.5f));
            y[2 + j] = static_cast<std::byte>(q0 | q1 << 4);
        }
    }
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
            auto* q = reinterpret_cast<std::int8_t*>(out) + begin;
            if (format.rule == QuantRule::ggml) {
                constexpr std::uint64_t kChunk = std::uint64_t{1} << 20;  // whole blocks, an int's worth at most
                for (std::uint64_t at = 0; at < end - begin; at += kChunk)
                    quantize_ggml(q + at, scales.data() + at / gs, w + begin + at,
                                  static_cast<int>(std::min(kChunk, end - begin - at)), format.group_size);
            } else {
                quantize_q80(q, scales.data(), w + begin, end - begin, format.group_size);
            }
            std::memcpy(out + n + begin / gs * sizeof(float), scales.data(), scales.size() * sizeof(float));
            return;
        }
        case ElementType::q4_0: encode_q4_0_range(out, w, begin, end); return;
    }
}

// ggml's Q8_0 blocks for weights [begin, end): quantize_ggml's values, its scale as the half it was.
void encode_q8_0_range(std::byte* out, const float* w, std::uint64_t begin, std::uint64_t end) {
    for (std::uint64_t block = begin / 32; block < end / 32; ++block) {
        std::int8_t q[32];
        float scale = 0.0f;
        quantize_ggml(q, &scale, w + block * 32, 32, 32);
        const std::uint16_t half = float_to_half(scale);
        std::memcpy(out + block * 34, &half, sizeof half);
        std::memcpy(out + block * 34 + 2, q, sizeof q);
    }
}

// f(begin, end) over [0, n) in slices of whole units (a unit's encoding depends on its weights alone, so
// slices are independent), one thread per usable CPU taking the next slice.
void in_slices(std::uint64_t n, std::uint64_t unit, const std::function<void(std::uint64_t, std::uint64_t)>& f) {
    constexpr std::uint64_t kSliceWeights = 1u << 22;
    const std::uint64_t slice = std::max(unit, kSliceWeights / unit * unit), slices = (n + slice - 1) / slice;
    const auto threads = static_cast<unsigned>(std::min<std::uint64_t>(slices, static_cast<unsigned>(usable_cpus())));
    if (threads <= 1) {
        f(0, n);
        return;
    }
    std::atomic<std::uint64_t> next{0};
    std::vector<std::thread> workers;
    for (unsigned t = 0; t < threads; ++t)
        workers.emplace_back([&] {
            for (std::uint64_t s = next++; s < slices; s = next++) f(s * slice, std::min(n, (s + 1) * slice));
        });
    for (std::thread& worker : workers) worker.join();
}

const char* non_finite_name(float x) { return std::isnan(x) ? "NaN" : x > 0 ? "infinity" : "-infinity"; }

}  // namespace

void encode_weights(std::byte* out, const float* w, std::uint64_t n, const WeightFormat& format) {
    const std::uint64_t gs = format.quantized() ? static_cast<std::uint64_t>(format.group_size) : 1;
    in_slices(n, gs, [&](std::uint64_t begin, std::uint64_t end) { encode_range(out, w, n, begin, end, format); });
}

void encode_ggml(std::byte* out, const float* w, std::uint64_t n, GgmlType type) {
    switch (type) {
        case GgmlType::f32:
            return encode_weights(out, w, n, {ElementType::f32});
        case GgmlType::f16:
            return encode_weights(out, w, n, {ElementType::f16});
        case GgmlType::q8_0:
            return in_slices(n, 32, [&](std::uint64_t b, std::uint64_t e) { encode_q8_0_range(out, w, b, e); });
        case GgmlType::q4_0:
            return in_slices(n, 32, [&](std::uint64_t b, std::uint64_t e) { encode_q4_0_range(out, w, b, e); });
        default:
            throw Error("cannot encode weights as " + ggml_type_name(static_cast<std::uint32_t>(type)));
    }
}

bool half_holds(float magnitude) { return (float_to_half(magnitude) & 0x7c00u) != 0x7c00u; }

float require_finite(const float* w, std::uint64_t n, const std::string& tensor) {
    float amax = 0.0f;
    for (std::uint64_t i = 0; i < n; ++i) {
        if (!std::isfinite(w[i]))
            throw Error(tensor + " holds " + non_finite_name(w[i]) + " (element " + std::to_string(i) +
                        "), and a model with a non-finite weight computes garbage; export the model again from "
                        "weights that are all finite");
        amax = std::max(amax, std::fabs(w[i]));
    }
    return amax;
}

namespace {

// `floats`: whether f16 weights convert too (they widen exactly).
void require_fp32(const Checkpoint& ck, const std::string& what, bool floats = false) {
    const auto converts = [&](const WeightFormat& f) {
        return f.type == ElementType::f32 || (floats && f.type == ElementType::f16);
    };
    const Config& c = ck.config();
    if (converts(c.weight_format) && converts(c.classifier_format())) return;
    const WeightFormat& held = converts(c.weight_format) ? c.classifier_format() : c.weight_format;
    if (ck.file() == ModelFile::gguf)
        throw usage_error(what + ": " + ck.path() + " holds " + held.describe() +
                          " weights; only a GGUF file whose matrices are F32 or F16 (or load as f32) converts");
    throw usage_error(what + ": " + ck.path() + " holds " + held.describe() +
                      " weights (llama2.c version " + std::to_string(ck.version()) +
                      "); only an fp32 checkpoint (version 0 or 1) converts");
}

std::uint64_t fp32_bytes(const Checkpoint& ck) {
    std::uint64_t total = 0;
    for_each_export_tensor(ck, [&](const std::string&, const float*, std::uint64_t n, bool) {
        total += n * sizeof(float);
    });
    return total;
}

}  // namespace

int default_group_size(const Config& c) {
    int gs = 64;
    while (c.dim % gs != 0 || c.hidden_dim % gs != 0) gs /= 2;
    return gs;
}

std::optional<WeightFormat> converted_format(const Config& c, ElementType type) {
    WeightFormat format{type, 0, c.quant_rule};
    if (type == ElementType::q8_0) format.group_size = c.quant_rule == QuantRule::runq ? default_group_size(c) : 32;
    if (type == ElementType::q4_0) format = WeightFormat::q4_0();
    if (format.rule == QuantRule::ggml && format.quantized() && (c.dim % 32 != 0 || c.hidden_dim % 32 != 0))
        return std::nullopt;
    return format;
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



void write_version2(const Checkpoint& fp32, const std::string& path, int group_size,
                    const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
    require_fp32(fp32, "quantize");
    const Config& c = fp32.config();
    check_group_size_flag(c, group_size, fp32.path());
    const WeightFormat q80{ElementType::q8_0, group_size};
    AtomicFile out(path, {{fp32.path(), "the input checkpoint"}}, "quantize");
    // The header: magic, version, the seven dimensions (vocab_size positive), the shared-classifier
    // byte, the group size (unaligned, packed after the byte), zeros up to 256 bytes.
    std::vector<std::byte> header(kHeaderBytes);
    const std::int32_t fields[8] = {2, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len};
    std::memcpy(header.data(), &kMagicAk42, 4);
    std::memcpy(header.data() + 4, fields, 8 * sizeof(std::int32_t));
    header[36] = std::byte{c.shared_classifier ? std::uint8_t{1} : std::uint8_t{0}};
    std::memcpy(header.data() + 37, &group_size, sizeof group_size);
    out.write(header.data(), header.size());

    const std::uint64_t total = fp32_bytes(fp32);
    std::uint64_t done = 0;
    std::vector<std::byte> encoded;
    for_each_export_tensor(fp32, [&](const std::string& name, const float* w, std::uint64_t n, bool quantized) {
        require_finite(w, n, "quantize: " + fp32.path() + ": " + name);
        const WeightFormat as = quantized ? q80 : WeightFormat{};
        encoded.resize(as.bytes(n));
        encode_weights(encoded.data(), w, n, as);
        out.write(encoded.data(), encoded.size());
        done += n * sizeof(float);
        if (progress) progress(done, total);
    });
    out.commit();
}

Checkpoint with_weights(Checkpoint ck, std::optional<ElementType> type) {
    if (!type || *type == ck.weight_format().type) return ck;  // (a classifier of its own format stays so)
    const std::string flag = std::string("--weights ") + element_name(*type);
    require_fp32(ck, flag, true);
    Config c = ck.config();
    const std::optional<WeightFormat> converted = converted_format(c, *type);
    if (!converted)
        throw usage_error(flag + ": ggml's " + (*type == ElementType::q4_0 ? "Q4_0" : "Q8_0") +
                          " quantizes rows in blocks of 32, and " + ck.path() + " has rows of " +
                          std::to_string(c.dim % 32 != 0 ? c.dim : c.hidden_dim) + "; run with --weights " +
                          (c.quant_rule == QuantRule::runq ? "q8_0, f16 or f32" : "f16 or f32"));
    c.weight_format = *converted;
    c.table_format.reset();
    std::uint64_t bytes = 0;
    for_each_export_tensor(ck, [&](const std::string&, const float*, std::uint64_t n, bool quantized) {
        bytes += (quantized ? c.weight_format : WeightFormat{}).bytes(n);
    });
    const ProgressLine progress("converting " + std::to_string(fp32_bytes(ck) >> 20) + " MiB of fp32 weights to " +
                               element_name(*type));
    HostBytes tensors(bytes);
    std::byte* at = tensors.data();
    // f16 holds each weight in a half, ggml's Q8_0 each block's scale (its largest magnitude / 127), Q4_0
    // each block's d (its largest magnitude / 8).
    const float per_half = *type == ElementType::f16    ? 1.0f
                           : *type == ElementType::q4_0 ? 8.0f
                           : c.weight_format.rule == QuantRule::ggml ? 127.0f : 0.0f;
    for_each_export_tensor(ck, [&](const std::string& name, const float* w, std::uint64_t n, bool quantized) {
        const std::string what = flag + ": " + ck.path() + ": " + name;
        const float amax = require_finite(w, n, what);
        if (quantized && per_half > 0 && !half_holds(amax / per_half))
            throw Error(what + " holds a weight of magnitude " + number_text("%g", amax) + ", beyond what " +
                        element_name(*type) + "'s halves hold (65504" + (per_half > 1 ? " for a block's scale" : "") +
                        "); run with --weights f32, or without --weights");
        const WeightFormat as = quantized ? c.weight_format : WeightFormat{};
        encode_weights(at, w, n, as);
        at += as.bytes(n);
    });
    return Checkpoint::from_tensors(c, std::move(tensors), ck.path() + " (" + flag + ")", ck.version(), ck.file());
}

}  // namespace llamacl
