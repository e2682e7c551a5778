// `quantize IN OUT.gguf`: ggml's Q4_0 and Q8_0 blocks against known vectors and a scalar transcription of
// ggml's reference quantizers; GgufWriter's files read back; round trips of the shared models against the
// files llama.cpp's tools wrote from the same weights, and their perplexity against llama.cpp's; the
// fallback types, and the refusals.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <tuple>
#include <vector>

#include "llamacl/checkpoint.hpp"
#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/ggml_types.hpp"
#include "llamacl/gguf_file.hpp"
#include "llamacl/gguf_writer.hpp"
#include "ggml_reference.hpp"
#include "gguf_expected.hpp"
#include "gguf_models.hpp"
#include "models.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

Bytes encoded(const std::vector<float>& x, GgmlType type) {
    Bytes out(ggml_bytes(*ggml_type_info(static_cast<std::uint32_t>(type)), x.size()));
    encode_ggml(out.data(), x.data(), x.size(), type);
    return out;
}

Bytes bytes_of(std::initializer_list<int> values) {
    Bytes out;
    for (const int v : values) out.push_back(static_cast<std::byte>(v));
    return out;
}

// Blocks of several kinds: Gaussian weights at scales from 1e-6 to 1e4, a few large outliers, small
// integers and halves (exact products, so that x * id + 8.5 lands on .5 and on integers), repeated values.
std::vector<float> assorted_blocks(std::size_t blocks, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal;
    std::uniform_int_distribution<int> small(-16, 16), kind(0, 4);
    std::vector<float> x;
    for (std::size_t b = 0; b < blocks; ++b) {
        const int k = kind(rng);
        const float scale = std::pow(10.0f, static_cast<float>(small(rng) % 7) - 2.0f);
        const float repeated = normal(rng);
        for (int j = 0; j < 32; ++j) {
            if (k == 0) x.push_back(normal(rng) * scale);
            if (k == 1) x.push_back(j == 7 ? 40.0f * scale : normal(rng) * scale);
            if (k == 2) x.push_back(static_cast<float>(small(rng)) * 0.5f);
            if (k == 3) x.push_back(repeated);
            if (k == 4) x.push_back(static_cast<float>(small(rng)) * 0.25f * scale);
        }
    }
    return x;
}

// --- the command ---

// models/gguf/NAME, or models/tok512.bin.
std::filesystem::path shared_model(const fs::path& shared, const std::string& name) {
    return shared / "models" / (name == "tok512.bin" ? name : "gguf/" + name);
}

CommandResult quantize(const fs::path& in, const fs::path& out, const std::string& flags = "") {
    return run_llama_cl("quantize " + quote(in.string()) + " " + quote(out.string()) + (flags.empty() ? "" : " " + flags));
}

long count_lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

double mean_nll(const fs::path& model, const fs::path& shared) {
    const CommandResult r = run_llama_cl("perplexity " + quote(model.string()) + " -f " +
                                         quote((shared / "reference/gguf/text1.txt").string()) + " --json --backend cpu");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r.exit_code == 0 ? nlohmann::json::parse(r.out)["mean_nll"].get<double>() : 0.0;
}

// expected.tsv's mean NLL for `model` (llama.cpp's CPU backend).
double llama_cpp_nll(const fs::path& shared, const std::string& model) {
    for (const ExpectedNll& e : llama_cpp_nlls(shared))
        if (e.model == model) return e.mean_nll;
    ADD_FAILURE() << "expected.tsv has no nll row for " << model;
    return 0.0;
}

bool same_value(const GgufValue& a, const GgufValue& b) {
    return a.type == b.type && a.element_type == b.element_type && a.count == b.count && a.bytes == b.bytes &&
           std::memcmp(a.data, b.data, a.bytes) == 0;
}

bool same_tensor(const GgufTensor& a, const GgufTensor& b) {
    return a.type == b.type && a.dims == b.dims && a.bytes == b.bytes && std::memcmp(a.data, b.data, a.bytes) == 0;
}

// Quantizes the shared llama2.c model synthG.bin with tok512.bin to `type` and checks the file against
// synthG-TYPE.gguf, which llama.cpp's convert-llama2c-to-ggml and llama-quantize wrote from the same
// weights: every tensor byte for byte, but for `differs`, whose type the tools chose otherwise.
void expect_synthg_is_llama_cpps(const std::string& type, const std::string& flags = "", const std::string& differs = "") {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    const fs::path out = dir / "x.gguf";
    const CommandResult r = quantize(shared_model(shared, "synthG.bin"), out,
                                     "--type " + type + " " + flags + " -z " + quote(shared_model(shared, "tok512.bin").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;  // "wrote ...": no fallback, no requantizing
    const GgufFile got = GgufFile::open(out.string());
    const GgufFile want = GgufFile::open(shared_model(shared, "synthG-" + type + ".gguf").string());
    EXPECT_EQ(got.version(), 3u);
    ASSERT_EQ(got.tensors().size(), want.tensors().size());
    for (const GgufTensor& t : got.tensors()) {
        const GgufTensor* w = want.tensor(t.name);
        ASSERT_NE(w, nullptr) << t.name;
        if (t.name == differs) continue;
        EXPECT_TRUE(same_tensor(t, *w)) << t.name << ": " << ggml_type_name(t.type) << " vs " << ggml_type_name(w->type);
    }
    // The vocabulary as convert-llama2c-to-ggml writes tok512.bin.
    for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                            "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                            "tokenizer.ggml.unknown_token_id"}) {
        ASSERT_NE(got.find(key), nullptr) << key;
        EXPECT_TRUE(same_value(*got.find(key), *want.find(key))) << key;
    }
    // The metadata: the Config of the .bin (the tools wrote a context of 128; its header says 256).
    const Checkpoint bin = Checkpoint::open(shared_model(shared, "synthG.bin").string());
    const Config& c = bin.config();
    EXPECT_EQ(got.string("general.architecture"), "llama");
    EXPECT_EQ(got.string("general.name"), "synthG");
    EXPECT_EQ(got.integer("general.alignment"), 32);
    EXPECT_EQ(got.integer("general.file_type"), want.integer("general.file_type").value_or(0));
    EXPECT_EQ(got.integer("general.quantization_version"), 2);
    EXPECT_EQ(got.integer("llama.context_length"), c.seq_len);
    EXPECT_EQ(got.integer("llama.embedding_length"), c.dim);
    EXPECT_EQ(got.integer("llama.block_count"), c.n_layers);
    EXPECT_EQ(got.integer("llama.feed_forward_length"), c.hidden_dim);
    EXPECT_EQ(got.integer("llama.rope.dimension_count"), c.head_size());
    EXPECT_EQ(got.integer("llama.attention.head_count"), c.n_heads);
    EXPECT_EQ(got.integer("llama.attention.head_count_kv"), c.n_kv_heads);
    EXPECT_EQ(got.integer("llama.vocab_size"), c.vocab_size);
    EXPECT_EQ(got.number("llama.attention.layer_norm_rms_epsilon"), static_cast<double>(1e-5f));
    EXPECT_EQ(got.number("llama.rope.freq_base"), 10000.0);
    EXPECT_EQ(got.find("rope_freqs.weight"), nullptr);

    // Within llama.cpp's mean NLL: 2e-4 where every tensor is the tools' (q4_0: see its test).
    const double nll = mean_nll(out, shared), reference = llama_cpp_nll(shared, "synthG-" + type + ".gguf");
    const double tolerance = differs.empty() ? 2e-4 : 1e-3;
    EXPECT_LE(std::fabs(nll - reference) / reference, tolerance) << "mean nll " << nll << ", llama.cpp's " << reference;
}

// A llama2.c model (dim 64, 2 layers, vocabulary 300) and its tokenizer tok.bin, in `dir`.
fs::path write_dim_64_model(const TempDir& dir, int hidden_dim) {
    return write_model(dir, Config{64, hidden_dim, 2, 4, 2, 300, 40, true});
}

// --- the quantizers ---

TEST(QuantizeGguf, Q4_0OnKnownVectors) {
    // max -8 first: d = 1; the low halves land on j + 0.5 (truncated to j), the high ones on integers.
    std::vector<float> ties(32);
    for (int j = 0; j < 16; ++j) {
        ties[j] = static_cast<float>(j) - 8.0f;
        ties[16 + j] = static_cast<float>(j) - 7.5f;
    }
    Bytes want = bytes_of({0x00, 0x3C});
    for (int j = 0; j < 16; ++j) want.push_back(static_cast<std::byte>(j | std::min(j + 1, 15) << 4));
    EXPECT_EQ(encoded(ties, GgmlType::q4_0), want);
    // Zeros: d = 0 / -8, a negative zero; id = 0, every q 8.
    Bytes zeros = bytes_of({0x00, 0x80});
    zeros.resize(18, std::byte{0x88});
    EXPECT_EQ(encoded(std::vector<float>(32, 0.0f), GgmlType::q4_0), zeros);
    // All equal: x * id = -8 gives 0, with d's sign the opposite of the weights'.
    EXPECT_EQ(encoded(std::vector<float>(32, 2.0f), GgmlType::q4_0), [] {
        Bytes b = bytes_of({0x00, 0xB4});  // -0.25
        b.resize(18, std::byte{0x00});
        return b;
    }());
    EXPECT_EQ(encoded(std::vector<float>(32, -2.0f), GgmlType::q4_0), [] {
        Bytes b = bytes_of({0x00, 0x34});  // 0.25
        b.resize(18, std::byte{0x00});
        return b;
    }());
    // Equal magnitudes: the first is the max (3 -> d = -0.375); the -3 at 20 is 16.5, clamped to 15.
    std::vector<float> first(32, 0.0f);
    first[5] = 3.0f;
    first[20] = -3.0f;
    Bytes want_first = bytes_of({0x00, 0xB6});
    want_first.resize(18, std::byte{0x88});
    want_first[2 + 5] = std::byte{0x80};
    want_first[2 + 4] = std::byte{0xF8};
    EXPECT_EQ(encoded(first, GgmlType::q4_0), want_first);
    // A negative max in the last place: d = 0.625; 4.9 at 0 is 16.34, clamped to 15.
    std::vector<float> last(32, 0.0f);
    last[0] = 4.9f;
    last[31] = -5.0f;
    Bytes want_last = bytes_of({0x00, 0x39});
    want_last.resize(18, std::byte{0x88});
    want_last[2 + 0] = std::byte{0x8F};
    want_last[2 + 15] = std::byte{0x08};
    EXPECT_EQ(encoded(last, GgmlType::q4_0), want_last);
}

TEST(QuantizeGguf, Q8_0OnKnownVectors) {
    // amax 127: d = 1; roundf takes halves away from zero.
    std::vector<float> x(32, 0.0f);
    const float values[] = {127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, -1.5f, 126.5f, -127.0f, 1.49f};
    std::copy(std::begin(values), std::end(values), x.begin());
    Bytes want = bytes_of({0x00, 0x3C, 127, 3, -3 & 0xFF, 1, -1 & 0xFF, 2, -2 & 0xFF, 127, -127 & 0xFF, 1});
    want.resize(34, std::byte{0});
    EXPECT_EQ(encoded(x, GgmlType::q8_0), want);
    EXPECT_EQ(encoded(std::vector<float>(32, 0.0f), GgmlType::q8_0), Bytes(34, std::byte{0}));
    // All equal and negative: d = 3 / 127 (the half 0x260C), every q -127.
    Bytes equal = bytes_of({0x0C, 0x26});
    equal.resize(34, std::byte{0x81});
    EXPECT_EQ(encoded(std::vector<float>(32, -3.0f), GgmlType::q8_0), equal);
}

TEST(QuantizeGguf, BlocksAreTheTranscriptionsOfGgmlsReference) {
    for (const std::uint32_t seed : {1u, 2u, 3u}) {
        const std::vector<float> x = assorted_blocks(4096, seed);
        EXPECT_EQ(encoded(x, GgmlType::q4_0), ggml_q4_0(x)) << seed;
        EXPECT_EQ(encoded(x, GgmlType::q8_0), ggml_q8_0(x)) << seed;
    }
}

TEST(QuantizeGguf, ALargeTensorIsEncodedAsItsBlocksAreOneByOne) {
    // Past the 4M-weight slices that threads share.
    const std::vector<float> x = assorted_blocks((std::size_t{9} << 20) / 32 + 3, 4);
    EXPECT_EQ(encoded(x, GgmlType::q4_0), ggml_q4_0(x));
    EXPECT_EQ(encoded(x, GgmlType::q8_0), ggml_q8_0(x));
}

TEST(QuantizeGguf, F16IsGgmlsHalfAndF32IsTheFloats) {
    std::vector<float> x = assorted_blocks(64, 5);
    for (const float special : {65504.0f, 65519.0f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, -0x1p-14f, 1e-9f})
        x.push_back(special);
    const Bytes halves = encoded(x, GgmlType::f16);
    for (std::size_t i = 0; i < x.size(); ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, halves.data() + 2 * i, 2);
        EXPECT_EQ(h, ggml_fp32_to_fp16(x[i])) << x[i];
    }
    const Bytes floats = encoded(x, GgmlType::f32);
    EXPECT_EQ(std::memcmp(floats.data(), x.data(), floats.size()), 0);
    EXPECT_THROW(encoded(x, GgmlType::q4_1), Error);
}

// --- the writer ---

TEST(GgufWriter, MetadataAndAlignedTensorsReadBack) {
    LLAMACL_REQUIRE_SHARED(shared);
    const GgufFile vocabulary = GgufFile::open(shared_model(shared, "ggml-vocab-llama-spm.gguf").string());
    GgufWriter w;
    w.add_u32("a.u32", 7);
    w.add_f32("a.f32", 0.25f);
    w.add_string("a.string", "text");
    const std::vector<std::string> strings{"x", "", "yz"};
    w.add_strings("a.strings", strings);
    const std::vector<float> floats{1.0f, -2.0f};
    w.add_f32s("a.f32s", floats);
    const std::vector<std::int32_t> ints{3, -4, 5};
    w.add_i32s("a.i32s", ints);
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.model", "tokenizer.ggml.bos_token_id"})
        w.add_value(key, *vocabulary.find(key));
    const Bytes first(3 * 18, std::byte{0x11}), second(5 * 4, std::byte{0x22});
    EXPECT_EQ(w.add_tensor("first", {32, 3}, GgmlType::q4_0), first.size());
    EXPECT_EQ(w.add_tensor("second", {5}, GgmlType::f32), second.size());

    auto image = std::make_shared<Bytes>(w.head());
    EXPECT_EQ(image->size() % 32, 0u);
    for (const Bytes* data : {&first, &second}) {
        image->insert(image->end(), data->begin(), data->end());
        image->resize(image->size() + w.padding(data->size()));
    }
    const GgufFile f = GgufFile::parse(image, "written");
    EXPECT_EQ(f.version(), 3u);
    EXPECT_EQ(f.alignment(), 32u);
    EXPECT_EQ(f.integer("a.u32"), 7);
    EXPECT_EQ(f.number("a.f32"), 0.25);
    EXPECT_EQ(f.string("a.string"), "text");
    const GgufValue* s = f.array("a.strings", GgufType::string);
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->count, 3u);
    for (std::uint64_t i = 0; i < 3; ++i) EXPECT_EQ(s->string_at(i), strings[i]);
    ASSERT_NE(f.array("a.f32s", GgufType::f32), nullptr);
    EXPECT_EQ(std::memcmp(f.array("a.f32s", GgufType::f32)->data, floats.data(), 8), 0);
    ASSERT_NE(f.array("a.i32s", GgufType::i32), nullptr);
    EXPECT_EQ(std::memcmp(f.array("a.i32s", GgufType::i32)->data, ints.data(), 12), 0);
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.model", "tokenizer.ggml.bos_token_id"})
        EXPECT_TRUE(same_value(*f.find(key), *vocabulary.find(key))) << key;
    ASSERT_EQ(f.tensors().size(), 2u);
    EXPECT_EQ(f.tensor("first")->dims, (std::vector<std::uint64_t>{32, 3}));
    EXPECT_EQ(f.tensor("first")->type, static_cast<std::uint32_t>(GgmlType::q4_0));
    EXPECT_EQ(std::memcmp(f.tensor("first")->data, first.data(), first.size()), 0);
    EXPECT_EQ(f.tensor("second")->offset, 64u);  // 54 bytes, padded to 64
    EXPECT_EQ(std::memcmp(f.tensor("second")->data, second.data(), second.size()), 0);
}

// --- round trips through llama.cpp's files ---

TEST(QuantizeGguf, SynthGQ8_0IsLlamaQuantizes) { expect_synthg_is_llama_cpps("q8_0"); }
TEST(QuantizeGguf, SynthGF16IsLlamaQuantizes) { expect_synthg_is_llama_cpps("f16"); }
TEST(QuantizeGguf, SynthGF32IsConvertLlama2cs) { expect_synthg_is_llama_cpps("f32"); }

// llama-quantize keeps the classifier in Q8_0 for Q4_0 files (its rows here are too short for Q6_K);
// --classifier-type q8_0 asks for the same, and then every tensor is llama-quantize's. Without it every
// matrix is --type's, so the classifier is the one tensor that differs.
TEST(QuantizeGguf, SynthGQ4_0WithAQ8_0ClassifierIsLlamaQuantizes) {
    expect_synthg_is_llama_cpps("q4_0", "--classifier-type q8_0");
}
TEST(QuantizeGguf, SynthGQ4_0IsLlamaQuantizesButForItsClassifier) {
    expect_synthg_is_llama_cpps("q4_0", "", "output.weight");
}

// Where the embedding table is the classifier, --classifier-type is its type; the layers keep --type's.
TEST(QuantizeGguf, ASharedClassifierTakesTheClassifierType) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    const fs::path out = dir / "l3.gguf";
    const CommandResult r =
        quantize(shared_model(shared, "l3-tiny-f32.gguf"), out, "--type q4_0 --classifier-type q8_0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const GgufFile got = GgufFile::open(out.string());
    EXPECT_EQ(got.tensor("token_embd.weight")->type, static_cast<std::uint32_t>(GgmlType::q8_0));
    EXPECT_EQ(got.tensor("blk.0.attn_q.weight")->type, static_cast<std::uint32_t>(GgmlType::q4_0));
    const Checkpoint ck = Checkpoint::open(out.string());
    EXPECT_EQ(ck.config().weight_format, WeightFormat::q4_0());
    EXPECT_EQ(ck.config().classifier_format(), (WeightFormat{ElementType::q8_0, 32, QuantRule::ggml}));
}

TEST(QuantizeGguf, GgufInputKeepsItsVocabularyAndRopeFactors) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    const fs::path out = dir / "l3.gguf";
    const CommandResult r = quantize(shared_model(shared, "l3-tiny-f32.gguf"), out, "--type q8_0");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const GgufFile got = GgufFile::open(out.string());
    const GgufFile input = GgufFile::open(shared_model(shared, "l3-tiny-f32.gguf").string());
    const GgufFile tools = GgufFile::open(shared_model(shared, "l3-tiny-q8_0.gguf").string());
    int copied = 0;
    for (const auto& [key, value] : input.metadata())
        if (key.starts_with("tokenizer.")) {
            ASSERT_NE(got.find(key), nullptr) << key;
            EXPECT_TRUE(same_value(*got.find(key), value)) << key;
            ++copied;
        }
    EXPECT_GE(copied, 8);
    EXPECT_EQ(got.string("general.name"), input.string("general.name"));
    EXPECT_EQ(got.number("llama.rope.freq_base"), 500000.0);
    EXPECT_EQ(got.tensor("output.weight"), nullptr);  // tied to the embedding
    ASSERT_EQ(got.tensors().size(), tools.tensors().size());
    for (const GgufTensor& t : got.tensors()) {
        ASSERT_NE(tools.tensor(t.name), nullptr) << t.name;
        EXPECT_TRUE(same_tensor(t, *tools.tensor(t.name))) << t.name;  // rope_freqs.weight included
    }
    const double nll = mean_nll(out, shared), reference = llama_cpp_nll(shared, "l3-tiny-q8_0.gguf");
    EXPECT_LE(std::fabs(nll - reference) / reference, 2e-4) << "mean nll " << nll << ", llama.cpp's " << reference;
    // Its vocabulary is its own: generate needs no -z.
    const CommandResult g = run_llama_cl("generate " + quote(out.string()) + " -n 8 -t 0 --backend cpu -i Hello");
    EXPECT_EQ(g.exit_code, 0) << g.err;
}

TEST(QuantizeGguf, GenerateRunsWithTheWrittenVocabulary) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    const fs::path out = dir / "x.gguf";
    ASSERT_EQ(quantize(shared_model(shared, "synthG.bin"), out,
                       "--type q4_0 -z " + quote(shared_model(shared, "tok512.bin").string()))
                  .exit_code,
              0);
    const CommandResult g = run_llama_cl("generate " + quote(out.string()) + " -n 16 -t 0 -i 'Once upon a time'");
    EXPECT_EQ(g.exit_code, 0) << g.err;
    EXPECT_TRUE(g.out.starts_with("Once upon a time")) << g.out;
    // The same tokens as the llama2.c file with its tokenizer.bin.
    const CommandResult bin = run_llama_cl("tokenize " + quote(shared_model(shared, "tok512.bin").string()) +
                                           " 'Once upon a time, a cat.'");
    const CommandResult gguf = run_llama_cl("tokenize " + quote(out.string()) + " 'Once upon a time, a cat.'");
    EXPECT_EQ(gguf.exit_code, 0) << gguf.err;
    EXPECT_EQ(gguf.out, bin.out);
}

// A file whose every matrix is Q4_0 loads as q4_0, its blocks as the file holds them; the llama2.c file
// converted at load (--weights q4_0) computes the same, and the device's exact shape the same bits.
TEST(QuantizeGguf, Q4_0FileLoadsAsItsBlocksAndMatchesWeightsQ4_0) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    const fs::path out = dir / "x.gguf", bin = shared_model(shared, "synthG.bin");
    ASSERT_EQ(quantize(bin, out, "--type q4_0 -z " + quote(shared_model(shared, "tok512.bin").string())).exit_code, 0);
    const Checkpoint ck = Checkpoint::open(out.string());
    EXPECT_EQ(ck.config().weight_format, WeightFormat::q4_0());
    const GgufFile file = GgufFile::open(out.string());
    const GgufTensor* w2 = file.tensor("blk.1.ffn_down.weight");
    ASSERT_NE(w2, nullptr);
    EXPECT_EQ(0, std::memcmp(ck.layer(1).w2.values, w2->data, w2->bytes));
    const auto nll = [&](const fs::path& model, const std::string& flags) {
        const CommandResult r = run_llama_cl("perplexity " + quote(model.string()) + " -f " +
                                             quote((shared / "reference/gguf/text1.txt").string()) + " --json " + flags);
        EXPECT_EQ(r.exit_code, 0) << flags << ": " << r.err;
        return r.exit_code == 0 ? nlohmann::json::parse(r.out)["mean_nll"].get<double>() : 0.0;
    };
    const double reference = nll(out, "--backend cpu");
    EXPECT_EQ(nll(bin, "--backend cpu --weights q4_0 -z " + quote(shared_model(shared, "tok512.bin").string())), reference);
    EXPECT_EQ(nll(out, "--backend opencl --work-shape exact"), reference);
    EXPECT_NEAR(nll(out, "--backend opencl"), reference, 1e-3 * reference);
}

TEST(QuantizeGguf, QuantizedInputIsRequantizedAndSaysSo) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    for (const auto& [in, type, held] : {std::tuple{"synthG-q8_0.gguf", "q4_0", "q8_0"},
                                         std::tuple{"synthG-q4_0.gguf", "q8_0", "q4_0"}}) {
        const CommandResult r = quantize(shared_model(shared, in), dir / "x.gguf", std::string("--force --type ") + type);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(count_lines(r.err), 2) << r.err;
        EXPECT_NE(r.err.find(std::string("holds ") + held + " (ggml's blocks of 32) weights; they are written as " + type +
                             " from their dequantized"),
                  std::string::npos)
            << r.err;
    }
}

// --- fallbacks and refusals ---

TEST(QuantizeGguf, RowsNotWholeBlocksTakeTheFallbackTypeAndSaySo) {
    TempDir dir;
    const fs::path model = write_dim_64_model(dir, 100);  // ffn_down's rows are 100 weights
    const std::string tok = " -z " + quote((dir / "tok.bin").string());
    const CommandResult r = quantize(model, dir / "a.gguf", "--type q4_0" + tok);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // q8_0, the default fallback, has blocks of 32 too: f16, one line per tensor.
    EXPECT_EQ(count_lines(r.err), 3) << r.err;
    for (const char* name : {"blk.0.ffn_down.weight", "blk.1.ffn_down.weight"})
        EXPECT_NE(r.err.find(std::string("quantize: ") + name + ": rows of 100 weights are not whole blocks of 32 for q4_0 or "
                                                                "q8_0 (--fallback-type): written as f16"),
                  std::string::npos)
            << r.err;
    const GgufFile a = GgufFile::open((dir / "a.gguf").string());
    for (const GgufTensor& t : a.tensors()) {
        const GgmlType want = t.dims.size() == 1                       ? GgmlType::f32
                              : t.name.find("ffn_down") != std::string::npos ? GgmlType::f16
                                                                             : GgmlType::q4_0;
        EXPECT_EQ(t.type, static_cast<std::uint32_t>(want)) << t.name;
    }
    const CommandResult f32 = quantize(model, dir / "b.gguf", "--type q8_0 --fallback-type f32" + tok);
    ASSERT_EQ(f32.exit_code, 0) << f32.err;
    EXPECT_NE(f32.err.find("blk.1.ffn_down.weight: rows of 100 weights are not whole blocks of 32 for q8_0: written as "
                           "f32 (--fallback-type)"),
              std::string::npos)
        << f32.err;
    EXPECT_EQ(GgufFile::open((dir / "b.gguf").string()).tensor("blk.0.ffn_down.weight")->type,
              static_cast<std::uint32_t>(GgmlType::f32));
    const CommandResult q8 = quantize(model, dir / "c.gguf", "--type q8_0" + tok);
    ASSERT_EQ(q8.exit_code, 0) << q8.err;
    EXPECT_NE(q8.err.find("blk.0.ffn_down.weight: rows of 100 weights are not whole blocks of 32 for q8_0: written as "
                          "f16\n"),
              std::string::npos)
        << q8.err;
    // The files run.
    for (const char* name : {"a.gguf", "b.gguf", "c.gguf"})
        EXPECT_EQ(run_llama_cl("generate " + quote((dir / name).string()) + " -n 4 --backend cpu").exit_code, 0) << name;
}

TEST(QuantizeGguf, RefusalsAreOneLineAndWriteNothing) {
    TempDir dir;
    const fs::path model = write_dim_64_model(dir, 96), tok = dir / "tok.bin", out = dir / "out.gguf";
    const std::string z = " -z " + quote(tok.string());
    struct Case {
        std::string flags, out, message;
        int exit_code;
    };
    const Case cases[] = {
        {"--type q4_0", "out.bin",
         "--type q4_0: a llama2.c checkpoint holds q8_0 weights and no vocabulary; name the output *.gguf", 2},
        {"--fallback-type f16", "out.bin", "--fallback-type: a llama2.c checkpoint holds q8_0 weights", 2},
        {z, "out.bin", "-z: a llama2.c checkpoint holds q8_0 weights", 2},
        {"--type q5_0" + z, "out.gguf", "--type q5_0: give q4_0, q8_0, f16 or f32", 2},
        {"--fallback-type q6_k" + z, "out.gguf", "--fallback-type q6_k: give q4_0, q8_0, f16 or f32", 2},
        {"--group-size 4" + z, "out.gguf", "--group-size: applies to llama2.c version-2 output", 2},
        {"--type q4_0", "out.gguf", "is a llama2.c checkpoint, which holds no vocabulary, and a GGUF file needs one: pass "
                                    "the model's tokenizer.bin with -z", 2},
    };
    for (const Case& c : cases) {
        const CommandResult r = quantize(model, dir / c.out, c.flags);
        EXPECT_EQ(r.exit_code, c.exit_code) << c.flags;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
        EXPECT_EQ(count_lines(r.err), 1) << r.err;
        EXPECT_FALSE(fs::exists(dir / c.out)) << c.flags;
    }
    // Never over an input, even with --force: the model (a GGUF file, by its name or a link's) or the tokenizer.
    ASSERT_EQ(quantize(model, out, z).exit_code, 0);
    const std::string before = read_file(out);
    fs::create_symlink(out, dir / "link.gguf");
    for (const fs::path& target : {out, dir / "link.gguf"}) {
        const CommandResult self = quantize(out, target, "--type q4_0 --force");
        EXPECT_EQ(self.exit_code, 1);
        EXPECT_NE(self.err.find("quantize: cannot write " + target.string() + ": it is the input checkpoint"),
                  std::string::npos)
            << self.err;
        EXPECT_EQ(count_lines(self.err), 1) << self.err;
    }
    EXPECT_EQ(read_file(out), before);
    const fs::path tok_gguf = dir / "tok.gguf";
    fs::copy_file(tok, tok_gguf);
    const CommandResult over_tokenizer = quantize(model, tok_gguf, "--force -z " + quote(tok_gguf.string()));
    EXPECT_EQ(over_tokenizer.exit_code, 1);
    EXPECT_NE(over_tokenizer.err.find("it is the tokenizer"), std::string::npos) << over_tokenizer.err;
    EXPECT_EQ(read_file(tok_gguf), read_file(tok));
}

TEST(QuantizeGguf, AnExistingOutputIsReplacedOnlyWithForce) {
    TempDir dir;
    const fs::path model = write_dim_64_model(dir, 96), out = dir / "out.gguf";
    const std::string z = " -z " + quote((dir / "tok.bin").string());
    ASSERT_EQ(quantize(model, out, "--type q8_0" + z).exit_code, 0);
    const std::string q8_0 = read_file(out);
    expect_error(quantize(model, out, "--type q4_0" + z), 2,
                 {"quantize: " + out.string() + " exists; pass --force to replace it"}, "without --force");
    EXPECT_EQ(read_file(out), q8_0);
    const CommandResult forced = quantize(model, out, "--type q4_0 --force" + z);
    ASSERT_EQ(forced.exit_code, 0) << forced.err;
    EXPECT_NE(read_file(out), q8_0);
    // The same for a version-2 output, by its name or a link's.
    const fs::path v2 = dir / "out.q80.bin", link = dir / "link.bin";
    ASSERT_EQ(quantize(model, v2).exit_code, 0);
    fs::create_symlink(v2, link);
    for (const fs::path& target : {v2, link})
        expect_error(quantize(model, target), 2, {target.string() + " exists; pass --force"}, target.string());
}

TEST(QuantizeGguf, GgufInputWithoutAVocabularyTakesTokenizerBin) {
    TempDir dir;
    const Config c{64, 96, 2, 4, 2, 300, 40, true};
    write_synthetic_tokenizer((dir / "tok.bin").string(), c.vocab_size);
    const auto nothing = std::make_shared<Bytes>(GgufWriter().head());
    const Bytes image = llama_gguf(c, GgufFile::parse(nothing, "no vocabulary"), [](const std::string&, std::uint64_t i) {
                            return std::sin(static_cast<float>(i)) * 0.1f;
                        }).build();
    const fs::path model = dir / "bare.gguf";
    std::ofstream(model, std::ios::binary).write(reinterpret_cast<const char*>(image.data()),
                                                 static_cast<std::streamsize>(image.size()));
    const CommandResult bare = quantize(model, dir / "x.gguf");
    EXPECT_EQ(bare.exit_code, 2);
    EXPECT_NE(bare.err.find("bare.gguf holds no vocabulary, and a GGUF file needs one: pass the model's tokenizer.bin "
                            "with -z"),
              std::string::npos)
        << bare.err;
    EXPECT_FALSE(fs::exists(dir / "x.gguf"));
    const CommandResult r = quantize(model, dir / "x.gguf", "-z " + quote((dir / "tok.bin").string()));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const CommandResult g = run_llama_cl("generate " + quote((dir / "x.gguf").string()) + " -n 4 --backend cpu");
    EXPECT_EQ(g.exit_code, 0) << g.err;
}

// Overwrites the float at `offset` of `path`.
void put_float(const fs::path& path, std::uint64_t offset, float value) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(reinterpret_cast<const char*>(&value), sizeof value);
}

TEST(QuantizeGguf, NonFiniteWeightsAreRefusedNamingTheTensor) {
    TempDir dir;
    const fs::path model = write_dim_64_model(dir, 96);  // legacy llama2.c: a 28-byte header, then the embedding
    const std::string z = " -z " + quote((dir / "tok.bin").string());
    const std::uint64_t embedding = 28, rms_att = embedding + 300 * 64 * 4;
    const std::string prefix = "quantize: " + model.string() + ": ";
    struct Case {
        std::uint64_t offset;
        float value;
        std::string out, message;
    };
    const Case cases[] = {
        {embedding + 4 * 5, std::numeric_limits<float>::quiet_NaN(), "x.gguf",
         prefix + "the tensor token_embd.weight holds NaN (element 5)"},
        {embedding + 4 * 5, std::numeric_limits<float>::quiet_NaN(), "x.bin",
         prefix + "token_embedding_table holds NaN (element 5)"},
        {rms_att + 4 * 70, -std::numeric_limits<float>::infinity(), "x.gguf",
         prefix + "the tensor blk.1.attn_norm.weight holds -infinity (element 6)"},
        {rms_att + 4 * 70, std::numeric_limits<float>::infinity(), "x.bin",
         prefix + "rms_att_weight of layer 1 holds infinity (element 6)"},
    };
    const std::string original = read_file(model);
    for (const Case& c : cases) {
        std::ofstream(model, std::ios::binary) << original;
        put_float(model, c.offset, c.value);
        const CommandResult r = quantize(model, dir / c.out, c.out.ends_with(".gguf") ? z : "");
        EXPECT_EQ(r.exit_code, 1) << c.message;
        EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
        EXPECT_EQ(count_lines(r.err), 1) << r.err;
        EXPECT_FALSE(fs::exists(dir / c.out));
    }
}

TEST(QuantizeGguf, WeightsBeyondWhatHalvesHoldAreRefused) {
    TempDir dir;
    const fs::path model = write_dim_64_model(dir, 96);
    const std::string z = " -z " + quote((dir / "tok.bin").string());
    put_float(model, 28 + 4 * 3, 1e6f);  // a Q8_0 scale of 7874 holds it; a Q4_0 one of 125000 and a half do not
    for (const char* type : {"q4_0", "f16"}) {
        const CommandResult r = quantize(model, dir / "x.gguf", std::string("--type ") + type + z);
        EXPECT_EQ(r.exit_code, 1) << type;
        EXPECT_NE(r.err.find("the tensor token_embd.weight holds a weight of magnitude 1e+06, beyond what"), std::string::npos)
            << r.err;
        EXPECT_NE(r.err.find("write it with --type f32"), std::string::npos) << r.err;
        EXPECT_FALSE(fs::exists(dir / "x.gguf"));
    }
    for (const char* type : {"q8_0", "f32"})
        EXPECT_EQ(quantize(model, dir / "x.gguf", std::string("--force --type ") + type + z).exit_code, 0) << type;
}

}  // namespace
