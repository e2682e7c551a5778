#include "llamacl/gguf_model.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/ggml_types.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/model_math.hpp"

namespace llamacl {

namespace {

// Dimensions a model may have: enough for any Llama, small enough that sizes derived from them stay exact.
constexpr std::int64_t kMaxDimension = std::int64_t{1} << 24;
constexpr std::int64_t kMaxLayers = 4096;
constexpr std::int64_t kMaxContext = std::int64_t{1} << 24;

struct Reader {
    const GgufFile& file;

    Error bad(const std::string& what) const { return Error(file.path() + ": " + what); }

    // A positive count under `key`, at most `max`; `fallback` when absent (0: the key is required).
    int count(const std::string& key, std::int64_t max, int fallback = 0) const {
        const std::optional<std::int64_t> v = file.integer(key);
        if (!v) {
            if (fallback > 0) return fallback;
            throw bad("the metadata key " + key + " is missing; a Llama GGUF file has it (convert the model again)");
        }
        if (*v <= 0 || *v > max)
            throw bad(key + " is " + std::to_string(*v) + "; it must be from 1 to " + std::to_string(max));
        return static_cast<int>(*v);
    }

    float positive(const std::string& key, float fallback) const {
        const std::optional<double> v = file.number(key);
        if (!v) return fallback;
        const float f = static_cast<float>(*v);
        if (!(f > 0.0f) || f == std::numeric_limits<float>::infinity())
            throw bad(key + " is " + std::to_string(*v) + "; it must be a positive finite number");
        return f;
    }

    // The tensor `name` with exactly `dims` (innermost first).
    const GgufTensor& tensor(const std::string& name, std::initializer_list<std::uint64_t> dims) const {
        const GgufTensor* t = file.tensor(name);
        if (!t) throw bad("the tensor " + name + " is missing; the file is not a complete Llama model");
        if (!std::equal(t->dims.begin(), t->dims.end(), dims.begin(), dims.end())) {
            const auto text = [](auto begin, auto end) {
                std::string s;
                for (auto it = begin; it != end; ++it) s += (s.empty() ? "" : " x ") + std::to_string(*it);
                return s;
            };
            throw bad("the tensor " + name + " is " + text(t->dims.begin(), t->dims.end()) + ", but the metadata makes it " +
                      text(dims.begin(), dims.end()));
        }
        return *t;
    }
};

Config read_config(const Reader& r) {
    const GgufFile& f = r.file;
    const std::optional<std::string_view> arch = f.string("general.architecture");
    if (!arch) throw r.bad("general.architecture is missing; only Llama models (architecture \"llama\") run");
    if (*arch != "llama")
        throw r.bad("the architecture is \"" + printable(*arch) + "\"; llama-cl runs Llama models (\"llama\") only");
    Config c;
    c.dim = r.count("llama.embedding_length", kMaxDimension);
    c.hidden_dim = r.count("llama.feed_forward_length", kMaxDimension);
    c.n_layers = r.count("llama.block_count", kMaxLayers);
    c.n_heads = r.count("llama.attention.head_count", kMaxDimension);
    c.n_kv_heads = r.count("llama.attention.head_count_kv", kMaxDimension, c.n_heads);
    c.seq_len = r.count("llama.context_length", kMaxContext);
    if (c.dim % c.n_heads != 0) throw r.bad("llama.embedding_length is not a multiple of llama.attention.head_count");
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
        throw r.bad("llama.attention.head_count is not a multiple of llama.attention.head_count_kv");
    if (c.head_size() % 2 != 0) throw r.bad("the head size (embedding_length / head_count) is odd; RoPE needs pairs");
    if (r.count("llama.rope.dimension_count", kMaxDimension, c.head_size()) != c.head_size())
        throw r.bad("llama.rope.dimension_count is not the head size " + std::to_string(c.head_size()) +
                    ": partial rotary embeddings are not supported");
    c.norm_eps = r.positive("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    c.rope_base = r.positive("llama.rope.freq_base", 10000.0f);
    c.quant_rule = QuantRule::ggml;
    const GgufTensor* embedding = f.tensor("token_embd.weight");
    if (!embedding) throw r.bad("the tensor token_embd.weight is missing; the file is not a complete Llama model");
    if (embedding->dims.size() != 2 || embedding->dims[0] != static_cast<std::uint64_t>(c.dim) ||
        embedding->dims[1] > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
        throw r.bad("the tensor token_embd.weight is not embedding_length wide");
    c.vocab_size = static_cast<int>(embedding->dims[1]);
    c.shared_classifier = f.tensor("output.weight") == nullptr;
    if (const GgufTensor* factors = f.tensor("rope_freqs.weight")) {
        r.tensor("rope_freqs.weight", {static_cast<std::uint64_t>(c.head_size() / 2)});
        if (factors->type != static_cast<std::uint32_t>(GgmlType::f32))
            throw r.bad("the tensor rope_freqs.weight is " + ggml_type_name(factors->type) + "; it must be F32");
        c.rope_factors.resize(factors->dims[0]);
        std::memcpy(c.rope_factors.data(), factors->data, factors->bytes);
        for (float factor : c.rope_factors)
            if (!(factor > 0.0f) || factor == std::numeric_limits<float>::infinity())
                throw r.bad("the tensor rope_freqs.weight holds a factor that is not a positive finite number");
    }
    return c;
}

// What a tensor is to the runtime's formats: a norm (always f32), a layer's matrix (Config::weight_format),
// or the embedding table or classifier (Config::classifier_format).
enum class Role { norm, matrix, table };

// A tensor's place in llama2.c's export order, with the shape it must have.
struct Slot {
    std::string name;
    std::uint64_t rows, columns;
    Role role;
};

std::vector<Slot> export_order(const Config& c) {
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
    std::vector<Slot> slots;
    const auto per_layer = [&](const char* name, std::uint64_t rows, std::uint64_t columns, Role role) {
        for (int l = 0; l < c.n_layers; ++l)
            slots.push_back({"blk." + std::to_string(l) + "." + name + ".weight", rows, columns, role});
    };
    per_layer("attn_norm", 1, dim, Role::norm);
    per_layer("ffn_norm", 1, dim, Role::norm);
    slots.push_back({"output_norm.weight", 1, dim, Role::norm});
    slots.push_back({"token_embd.weight", vocab, dim, Role::table});
    per_layer("attn_q", dim, dim, Role::matrix);
    per_layer("attn_k", kv, dim, Role::matrix);
    per_layer("attn_v", kv, dim, Role::matrix);
    per_layer("attn_output", dim, dim, Role::matrix);
    per_layer("ffn_gate", hidden, dim, Role::matrix);
    per_layer("ffn_down", dim, hidden, Role::matrix);
    per_layer("ffn_up", hidden, dim, Role::matrix);
    if (!c.shared_classifier) slots.push_back({"output.weight", vocab, dim, Role::table});
    return slots;
}

// The runtime's format for tensors of these types, one format holding every one of them exactly (the
// header's rule); the types it dequantizes to f32 are counted into `dequantized`.
WeightFormat runtime_format(const std::map<GgmlType, int>& types, std::map<GgmlType, int>& dequantized) {
    const auto only = [&](std::initializer_list<GgmlType> allowed) {
        return std::all_of(types.begin(), types.end(), [&](const auto& entry) {
            return std::find(allowed.begin(), allowed.end(), entry.first) != allowed.end();
        });
    };
    if (only({GgmlType::f32})) return {ElementType::f32, 0};
    if (only({GgmlType::f16})) return {ElementType::f16, 0};
    if (only({GgmlType::q4_0})) return WeightFormat::q4_0();
    if (only({GgmlType::q8_0, GgmlType::q4_0})) return {ElementType::q8_0, 32, QuantRule::ggml};
    for (const auto& [type, n] : types)
        if (type != GgmlType::f32) dequantized[type] += n;
    return {ElementType::f32, 0};
}

// The note for tensors dequantized at load, or "".
std::string dequantized_note(const std::map<GgmlType, int>& dequantized) {
    std::string counts;
    for (const auto& [type, n] : dequantized)
        counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + ggml_type_name(static_cast<std::uint32_t>(type));
    return counts.empty() ? "" : "weights dequantized to f32 at load (" + counts + " tensors)";
}

// ggml's Q8_0 and Q4_0 blocks as q8_0 values and widened scales: 32 int8 at `values`, one float at `scale`.
void write_q8_block(GgmlType type, const std::byte* block, std::int8_t* values, float* scale) {
    std::uint16_t d = 0;
    std::memcpy(&d, block, sizeof d);
    *scale = half_to_float(d);
    if (type == GgmlType::q8_0) {
        std::memcpy(values, block + 2, 32);
        return;
    }
    for (int j = 0; j < 16; ++j) {  // Q4_0: byte j holds element j (low nibble) and element j + 16 (high)
        const auto byte = static_cast<std::uint8_t>(block[2 + j]);
        values[j] = static_cast<std::int8_t>((byte & 0x0F) - 8);
        values[j + 16] = static_cast<std::int8_t>((byte >> 4) - 8);
    }
}

// `t` stored at `out` in `format` (format.bytes(elements) bytes).
void convert(const GgufTensor& t, const WeightFormat& format, std::byte* out) {
    const auto type = static_cast<GgmlType>(t.type);
    const std::uint64_t n = t.elements();
    if ((format.type == ElementType::f32 && type == GgmlType::f32) ||
        (format.type == ElementType::f16 && type == GgmlType::f16) ||
        (format.type == ElementType::q4_0 && type == GgmlType::q4_0)) {
        std::memcpy(out, t.data, t.bytes);
    } else if (format.type == ElementType::f32) {
        std::vector<float> widened(n);  // (out need not be aligned to a float)
        ggml_dequantize(type, t.data, widened.data(), n);
        std::memcpy(out, widened.data(), n * sizeof(float));
    } else {  // q8_0 from Q8_0 or Q4_0 blocks
        const std::uint64_t blocks = n / 32, block_bytes = ggml_bytes(*ggml_type_info(t.type), 32);
        std::vector<float> scales(blocks);
        auto* values = reinterpret_cast<std::int8_t*>(out);
        for (std::uint64_t b = 0; b < blocks; ++b)
            write_q8_block(type, t.data + b * block_bytes, values + b * 32, &scales[b]);
        std::memcpy(out + n, scales.data(), blocks * sizeof(float));
    }
}

}  // namespace

Checkpoint read_gguf_model(const GgufFile& file) {
    const Reader r{file};
    Config c = read_config(r);
    const std::vector<Slot> slots = export_order(c);
    std::map<GgmlType, int> matrix_types, table_types;
    std::vector<const GgufTensor*> tensors;
    for (const Slot& s : slots) {
        const GgufTensor& t = s.role != Role::norm ? r.tensor(s.name, {s.columns, s.rows}) : r.tensor(s.name, {s.columns});
        const std::optional<GgmlTypeInfo> info = ggml_type_info(t.type);
        if (!info || !info->dequantizable)
            throw r.bad("the tensor " + s.name + " is of type " + ggml_type_name(t.type) +
                        ", which llama-cl cannot read (it reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and "
                        "Q2_K to Q6_K); convert the model with llama-quantize to one of those");
        if (s.role == Role::matrix) ++matrix_types[static_cast<GgmlType>(t.type)];
        if (s.role == Role::table) ++table_types[static_cast<GgmlType>(t.type)];
        tensors.push_back(&t);
    }
    std::map<GgmlType, int> dequantized;
    c.weight_format = runtime_format(matrix_types, dequantized);
    if (const WeightFormat table = runtime_format(table_types, dequantized); table != c.weight_format)
        c.table_format = table;
    const auto format_of = [&](const Slot& s) {
        return s.role == Role::matrix ? c.weight_format : s.role == Role::table ? c.classifier_format() : WeightFormat{};
    };
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < slots.size(); ++i) bytes += format_of(slots[i]).bytes(tensors[i]->elements());
    HostBytes image(bytes);
    std::byte* at = image.data();
    for (std::size_t i = 0; i < slots.size(); ++i) {
        const WeightFormat format = format_of(slots[i]);
        convert(*tensors[i], format, at);
        at += format.bytes(tensors[i]->elements());
    }
    return Checkpoint::from_tensors(c, std::move(image), file.path(), static_cast<int>(file.version()),
                                    ModelFile::gguf, dequantized_note(dequantized));
}

}  // namespace llamacl
