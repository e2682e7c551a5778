#include "llamacl/quantize.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <iterator>
#include <system_error>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "llamacl/atomic_file.hpp"
#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/gguf_file.hpp"
#include "llamacl/gguf_writer.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/number_text.hpp"
#include "llamacl/tokenizer.hpp"

namespace llamacl {

namespace {

// The types --type names, in the order output_type_names lists them, with llama.cpp's llama_ftype for a
// file whose matrices are of that type.
struct OutputType {
    const char* name;
    GgmlType type;
    std::uint32_t file_type;
};
constexpr OutputType kOutputTypes[] = {
    {"q4_0", GgmlType::q4_0, 2}, {"q8_0", GgmlType::q8_0, 7}, {"f16", GgmlType::f16, 1}, {"f32", GgmlType::f32, 0}};
constexpr GgmlType kDefaultOutputType = GgmlType::q8_0;

const OutputType& output_type(GgmlType type) {
    for (const OutputType& t : kOutputTypes)
        if (t.type == type) return t;
    throw Error("quantize: cannot write weights as " + ggml_type_name(static_cast<std::uint32_t>(type)));
}

GgmlType parse_output_type(const std::string& name, const char* flag) {
    if (name.empty()) return kDefaultOutputType;
    for (const OutputType& t : kOutputTypes)
        if (name == t.name) return t.type;
    throw usage_error(std::string(flag) + " " + name + ": give " + output_type_names());
}

std::uint32_t block_of(GgmlType type) { return ggml_type_info(static_cast<std::uint32_t>(type))->block; }
bool whole_blocks(GgmlType type, std::uint64_t row) { return row % block_of(type) == 0; }

// Whether weights up to `amax` in magnitude stay finite in `type`: its halves are the weights (F16) or the
// block scales, Q8_0's amax / 127 and Q4_0's amax / 8.
bool holds(GgmlType type, float amax) {
    switch (type) {
        case GgmlType::f16:
            return half_holds(amax);
        case GgmlType::q8_0:
            return half_holds(amax / 127.0f);
        case GgmlType::q4_0:
            return half_holds(amax / 8.0f);
        default:
            return true;
    }
}

// One tensor of the output: its name, where its weights are in the checkpoint, its shape (innermost first)
// and the type it is written in.
struct Planned {
    std::string name;
    WeightTensor source;
    std::vector<std::uint64_t> dims;
    GgmlType type;
    bool matrix;
    GgmlType asked = GgmlType::f32;  // a matrix's type as asked for (--type or --classifier-type)

    std::uint64_t elements() const { return dims.size() == 1 ? dims[0] : dims[0] * dims[1]; }
};

// The tensors in llama.cpp's names, norms and RoPE factors in F32, each matrix in the output's type or
// its fallbacks.
std::vector<Planned> plan(const Checkpoint& ck, const GgufOutput& o) {
    const Config& c = ck.config();
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    std::vector<Planned> tensors;
    const auto f32 = [](const float* values) { return WeightTensor{WeightFormat{}, values}; };
    const auto vector = [&](std::string name, WeightTensor source, std::uint64_t n) {
        tensors.push_back({std::move(name), source, {n}, GgmlType::f32, false});
    };
    const auto matrix = [&](std::string name, WeightTensor source, std::uint64_t rows, std::uint64_t columns,
                            GgmlType asked) {
        GgmlType type = asked;
        if (!whole_blocks(type, columns)) type = whole_blocks(o.fallback, columns) ? o.fallback : GgmlType::f16;
        tensors.push_back({std::move(name), source, {columns, rows}, type, true, asked});
    };
    if (!c.rope_factors.empty()) vector("rope_freqs.weight", f32(c.rope_factors.data()), c.rope_factors.size());
    // The classifier is output.weight, or the embedding table when shared (llama-quantize's rule too).
    matrix("token_embd.weight", ck.embedding_weights(), vocab, dim, c.shared_classifier ? o.classifier : o.type);
    vector("output_norm.weight", f32(ck.rms_final()), dim);
    if (!c.shared_classifier) matrix("output.weight", ck.classifier(), vocab, dim, o.classifier);
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights w = ck.layer(l);
        const std::string blk = "blk." + std::to_string(l) + ".";
        vector(blk + "attn_norm.weight", w.rms_att, dim);
        matrix(blk + "attn_q.weight", w.wq, dim, dim, o.type);
        matrix(blk + "attn_k.weight", w.wk, kv, dim, o.type);
        matrix(blk + "attn_v.weight", w.wv, kv, dim, o.type);
        matrix(blk + "attn_output.weight", w.wo, dim, dim, o.type);
        vector(blk + "ffn_norm.weight", w.rms_ffn, dim);
        matrix(blk + "ffn_gate.weight", w.w1, hidden, dim, o.type);
        matrix(blk + "ffn_down.weight", w.w2, dim, hidden, o.type);
        matrix(blk + "ffn_up.weight", w.w3, hidden, dim, o.type);
    }
    return tensors;
}

// The line for a matrix written in another type than asked: its name, its rows, the types that do not
// fit them and the one that does.
std::string fallback_note(const Planned& t, const GgufOutput& o) {
    std::string tried = output_type(t.asked).name;
    if (o.fallback != t.asked && t.type != o.fallback)
        tried += std::string(" or ") + output_type(o.fallback).name + " (--fallback-type)";
    return "quantize: " + t.name + ": rows of " + std::to_string(t.dims[0]) + " weights are not whole blocks of " +
           std::to_string(block_of(t.asked)) + " for " + tried + ": written as " + output_type(t.type).name +
           (t.type == o.fallback ? " (--fallback-type)" : "");
}

// tokenizer.bin as llama.cpp's convert-llama2c-to-ggml writes it: SentencePiece's names for ids 0 to 2
// (llama2.c's export wraps BOS and EOS in newlines for run.c's printing), spaces as U+2581, and each
// token's type: unknown (0), control (1, 2 and empty pieces), byte ("<0xXX>") or normal.
void add_vocabulary(GgufWriter& w, const Tokenizer& tokenizer, int vocab_size) {
    enum : std::int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6 };
    constexpr const char* kNamed[] = {"<unk>", "<s>", "</s>"};
    const auto is_byte_piece = [](std::string_view p) {
        const auto hex = [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)) != 0; };
        return p.size() == 6 && p.starts_with("<0x") && hex(p[3]) && hex(p[4]) && p.ends_with('>');
    };
    std::vector<std::string> tokens;
    std::vector<float> scores;
    std::vector<std::int32_t> types;
    for (int id = 0; id < vocab_size; ++id) {
        const std::string_view piece = tokenizer.piece(id);
        std::string text;
        if (id < 3) {
            text = kNamed[id];
        } else {
            for (const char ch : piece) text += ch == ' ' ? std::string_view("\xE2\x96\x81") : std::string_view(&ch, 1);
        }
        tokens.push_back(std::move(text));
        scores.push_back(tokenizer.score(id));
        types.push_back(id == 0                   ? kUnknown
                        : id < 3 || piece.empty() ? kControl
                        : is_byte_piece(piece)    ? kByte
                                                  : kNormal);
    }
    w.add_string("tokenizer.ggml.model", "llama");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_f32s("tokenizer.ggml.scores", scores);
    w.add_i32s("tokenizer.ggml.token_type", types);
    const std::pair<const char*, std::uint32_t> ids[] = {
        {"tokenizer.ggml.unknown_token_id", 0}, {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2}};
    for (const auto& [key, id] : ids)
        if (id < static_cast<std::uint32_t>(vocab_size)) w.add_u32(key, id);
}

void copy_vocabulary(GgufWriter& w, const GgufFile& file) {
    for (const auto& [key, value] : file.metadata())
        if (key.starts_with("tokenizer.")) w.add_value(key, value);
}

}  // namespace

void write_gguf(const Checkpoint& ck, const std::string& path, const GgufOutput& o,
                const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
    const Config& c = ck.config();
    const OutputType& type = output_type(o.type);
    const std::optional<GgufFile> source =
        ck.file() == ModelFile::gguf ? std::optional(GgufFile::open(ck.path())) : std::nullopt;
    if (o.tokenizer.empty() && !(source && source->find("tokenizer.ggml.model")))
        throw usage_error("quantize: " + ck.path() +
                          (source ? " holds no vocabulary" : " is a llama2.c checkpoint, which holds no vocabulary") +
                          ", and a GGUF file needs one: pass the model's tokenizer.bin with -z");

    GgufWriter w;
    w.add_string("general.architecture", "llama");
    const std::optional<std::string_view> name = source ? source->string("general.name") : std::nullopt;
    w.add_string("general.name", name ? std::string(*name) : std::filesystem::path(ck.path()).stem().string());
    w.add_u32("general.file_type", type.file_type);
    w.add_u32("general.quantization_version", 2);  // ggml's block formats' version, as llama-quantize writes it
    w.add_u32("llama.context_length", static_cast<std::uint32_t>(c.seq_len));
    w.add_u32("llama.embedding_length", static_cast<std::uint32_t>(c.dim));
    w.add_u32("llama.block_count", static_cast<std::uint32_t>(c.n_layers));
    w.add_u32("llama.feed_forward_length", static_cast<std::uint32_t>(c.hidden_dim));
    w.add_u32("llama.rope.dimension_count", static_cast<std::uint32_t>(c.head_size()));
    w.add_u32("llama.attention.head_count", static_cast<std::uint32_t>(c.n_heads));
    w.add_u32("llama.attention.head_count_kv", static_cast<std::uint32_t>(c.n_kv_heads));
    w.add_f32("llama.attention.layer_norm_rms_epsilon", c.norm_eps);
    w.add_f32("llama.rope.freq_base", c.rope_base);
    w.add_u32("llama.vocab_size", static_cast<std::uint32_t>(c.vocab_size));
    std::vector<InputFile> inputs{{ck.path(), "the input checkpoint"}};
    if (!o.tokenizer.empty()) {
        add_vocabulary(w, Tokenizer::load(o.tokenizer, c.vocab_size), c.vocab_size);
        inputs.push_back({o.tokenizer, "the tokenizer"});
    } else {
        copy_vocabulary(w, *source);
    }

    AtomicFile out(path, inputs, "quantize");
    const std::vector<Planned> tensors = plan(ck, o);
    for (const Planned& t : tensors) {
        w.add_tensor(t.name, t.dims, t.type);
        if (t.matrix && t.type != t.asked) report(fallback_note(t, o));
    }
    const WeightFormat held = ck.weight_format().quantized() ? ck.weight_format() : ck.config().classifier_format();
    if (held.quantized() || !ck.load_note().empty())
        report("quantize: " + ck.path() + ": " +
               (ck.load_note().empty() ? "holds " + held.describe() + " weights" : ck.load_note()) +
               "; they are written as " + type.name + " from their dequantized values (quantize from the f32 or f16 "
               "model where you have it)");

    const std::vector<std::byte> head = w.head();
    out.write(head.data(), head.size());
    std::uint64_t total = 0, done = 0;
    for (const Planned& t : tensors) total += t.elements() * sizeof(float);
    std::vector<float> widened;
    std::vector<std::byte> encoded;
    const std::vector<std::byte> zeros(32);
    for (const Planned& t : tensors) {
        const std::uint64_t n = t.elements();
        const float* weights = t.source.f32();
        if (t.source.format.type != ElementType::f32) {
            widened.resize(n);
            dequantize(widened.data(), t.source, n);
            weights = widened.data();
        }
        const std::string what = "quantize: " + ck.path() + ": the tensor " + t.name;
        const float amax = require_finite(weights, n, what);
        if (!holds(t.type, amax))
            throw Error(what + " holds a weight of magnitude " + number_text("%g", amax) + ", beyond what " +
                        output_type(t.type).name + "'s halves hold (65504" +
                        (t.type == GgmlType::f16 ? "" : " for a block's scale") + "); write it with --type f32");
        encoded.resize(ggml_bytes(*ggml_type_info(static_cast<std::uint32_t>(t.type)), n));
        encode_ggml(encoded.data(), weights, n, t.type);
        out.write(encoded.data(), encoded.size());
        out.write(zeros.data(), w.padding(encoded.size()));
        done += n * sizeof(float);
        if (progress) progress(done, total);
    }
    out.commit();
}

std::string output_type_names() {
    std::string names;
    const std::size_t count = std::size(kOutputTypes);
    for (std::size_t i = 0; i < count; ++i)
        names += std::string(i == 0 ? "" : i + 1 == count ? " or " : ", ") + kOutputTypes[i].name;
    return names;
}

const char* default_output_type() { return output_type(kDefaultOutputType).name; }

int run_quantize(const QuantizeArgs& a) {
    const GgmlType type = parse_output_type(a.type, "--type");
    const GgufOutput output{type,
                            a.classifier_type.empty() ? type : parse_output_type(a.classifier_type, "--classifier-type"),
                            parse_output_type(a.fallback_type, "--fallback-type"), a.tokenizer};
    const bool gguf = a.output.ends_with(".gguf");
    if (!gguf) {
        const auto gguf_only = [&](const std::string& flag) {
            return usage_error(flag + ": a llama2.c checkpoint holds q8_0 weights and no vocabulary; name the output " +
                               "*.gguf for a GGUF file (" + a.output + " is written as llama2.c version 2)");
        };
        if (!a.type.empty() && a.type != "q8_0") throw gguf_only("--type " + a.type);
        if (!a.fallback_type.empty()) throw gguf_only("--fallback-type");
        if (!a.classifier_type.empty()) throw gguf_only("--classifier-type");
        if (!a.tokenizer.empty()) throw gguf_only("-z");
    } else if (a.group_size != 0) {
        throw usage_error("--group-size: applies to llama2.c version-2 output; a GGUF file's q4_0 and q8_0 blocks are "
                          "32 weights (leave --group-size out for " + a.output + ")");
    }
    // An existing file is someone's work: replaced only when asked. (Never an input, a directory or a
    // device, even then: AtomicFile refuses those.)
    std::error_code ec;
    if (!a.force && std::filesystem::is_regular_file(a.output, ec))
        throw usage_error("quantize: " + a.output + " exists; pass --force to replace it, or name another output");
    const Checkpoint ck = Checkpoint::open(a.input);
    // A live progress line only where someone watches it, and only when there is time to watch.
    const bool live = ::isatty(STDERR_FILENO) && ModelSize(ck.config()).weight_bytes() >= (256ull << 20);
    const auto show = [&](std::uint64_t done, std::uint64_t total) {
        if (live) std::fprintf(stderr, "\rquantizing: %.1f of %.1f GB", static_cast<double>(done) / 1e9,
                               static_cast<double>(total) / 1e9);
    };
    std::string written;  // what a reader sees of the file
    if (gguf) {
        write_gguf(ck, a.output, output, show);
        std::map<std::uint32_t, int> types;
        const GgufFile file = GgufFile::open(a.output);
        for (const GgufTensor& t : file.tensors()) ++types[t.type];
        for (const auto& [written_type, count] : types)
            written += (written.empty() ? "" : ", ") + std::to_string(count) + " " + ggml_type_name(written_type);
        written = "GGUF version 3, " + std::string(output_type(output.type).name) + " (" + written + " tensors)";
    } else {
        write_version2(ck, a.output, a.group_size != 0 ? a.group_size : default_group_size(ck.config()), show);
        written = "llama2.c version 2, " + Checkpoint::open(a.output).weight_format().describe() + " weights";
    }
    std::fprintf(stderr, "%swrote %s: %s, %s bytes\n", live ? "\n" : "", a.output.c_str(), written.c_str(),
                 std::to_string(std::filesystem::file_size(a.output)).c_str());
    return 0;
}

}  // namespace llamacl
