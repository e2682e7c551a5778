// GGUF models: the loader's Config and tensors against the llama2.c files they were converted from,
// generation against those files' text, and perplexity against llama.cpp's CPU results
// (shared/reference/gguf/expected.tsv), on the CPU reference and on an OpenCL device.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <memory>
#include <fstream>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "llamacl/checkpoint.hpp"
#include "llamacl/ggml_types.hpp"
#include "llamacl/gguf_file.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/tokenizer.hpp"
#include "gguf_expected.hpp"
#include "gguf_models.hpp"
#include "reference_cases.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

std::filesystem::path gguf(const std::filesystem::path& shared, const std::string& name) {
    return shared / "models" / "gguf" / name;
}

// Every element of `a` and `b` (n of them, dequantized) bitwise equal.
void expect_same_tensor(const WeightTensor& a, const WeightTensor& b, std::uint64_t n, const std::string& what) {
    std::vector<float> x(n), y(n);
    dequantize(x.data(), a, n);
    dequantize(y.data(), b, n);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), n * sizeof(float)), 0) << what;
}

TEST(GgufModel, Stories260KIsTheLlama2cModelItWasConvertedFrom) {
    LLAMACL_REQUIRE_SHARED(shared);
    const Checkpoint bin = Checkpoint::open((shared / "models" / "stories260K.bin").string());
    const Checkpoint g = Checkpoint::open(gguf(shared, "stories260K-f32.gguf").string());
    const Config& c = g.config();
    EXPECT_EQ(g.file(), ModelFile::gguf);
    EXPECT_EQ(g.version(), 3);
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.hidden_dim, 172);
    EXPECT_EQ(c.n_layers, 5);
    EXPECT_EQ(c.n_heads, 8);
    EXPECT_EQ(c.n_kv_heads, 4);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.seq_len, 128);  // llama.context_length; the .bin says 512
    EXPECT_FALSE(c.shared_classifier);  // the converter writes output.weight
    EXPECT_EQ(c.norm_eps, 1e-5f);
    EXPECT_EQ(c.rope_base, 10000.0f);
    EXPECT_TRUE(c.rope_factors.empty());
    EXPECT_EQ(c.quant_rule, QuantRule::ggml);
    EXPECT_EQ(c.weight_format, (WeightFormat{ElementType::f32, 0}));
    EXPECT_TRUE(g.load_note().empty());
    const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim();
    expect_same_tensor(g.embedding_weights(), bin.embedding_weights(), 512 * dim, "token_embd");
    expect_same_tensor(g.classifier(), bin.classifier(), 512 * dim, "output");
    EXPECT_EQ(std::memcmp(g.rms_final(), bin.rms_final(), dim * sizeof(float)), 0);
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights a = g.layer(l), b = bin.layer(l);
        const std::string at = " of layer " + std::to_string(l);
        expect_same_tensor(a.rms_att, b.rms_att, dim, "attn_norm" + at);
        expect_same_tensor(a.wq, b.wq, dim * dim, "attn_q" + at);
        expect_same_tensor(a.wk, b.wk, kv * dim, "attn_k" + at);
        expect_same_tensor(a.wv, b.wv, kv * dim, "attn_v" + at);
        expect_same_tensor(a.wo, b.wo, dim * dim, "attn_output" + at);
        expect_same_tensor(a.rms_ffn, b.rms_ffn, dim, "ffn_norm" + at);
        expect_same_tensor(a.w1, b.w1, hidden * dim, "ffn_gate" + at);
        expect_same_tensor(a.w2, b.w2, dim * hidden, "ffn_down" + at);
        expect_same_tensor(a.w3, b.w3, hidden * dim, "ffn_up" + at);
    }
}

TEST(GgufModel, Llama3ShapeReadsRopeBaseFactorsAndTiedEmbeddings) {
    LLAMACL_REQUIRE_SHARED(shared);
    const Checkpoint g = Checkpoint::open(gguf(shared, "l3-tiny-f32.gguf").string());
    const Config& c = g.config();
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.hidden_dim, 192);
    EXPECT_EQ(c.n_layers, 2);
    EXPECT_EQ(c.n_heads, 4);
    EXPECT_EQ(c.n_kv_heads, 2);
    EXPECT_EQ(c.vocab_size, 50262);
    EXPECT_EQ(c.seq_len, 256);
    EXPECT_TRUE(c.shared_classifier);
    EXPECT_EQ(c.rope_base, 500000.0f);
    const std::vector<float> factors = {1, 1, 1, 1, 3.292262f, 32, 32, 32};
    ASSERT_EQ(c.rope_factors.size(), factors.size());
    for (std::size_t i = 0; i < factors.size(); ++i) EXPECT_NEAR(c.rope_factors[i], factors[i], 1e-6f) << i;
}

// Each role takes the one format that holds its tensors exactly: a Q4_0 file's layers stay Q4_0 blocks while
// its Q8_0 classifier or embedding (llama-quantize's) loads as q8_0 blocks of 32, with the Q4_0 embedding beside
// an unshared Q8_0 classifier; every value is ggml's dequantization exactly; norms stay f32.
TEST(GgufModel, EachRoleLoadsInTheFormatThatHoldsItsTensors) {
    LLAMACL_REQUIRE_SHARED(shared);
    const WeightFormat q8_0{ElementType::q8_0, 32, QuantRule::ggml};
    const struct {
        const char* name;
        WeightFormat layers;
        std::optional<WeightFormat> table;
    } files[] = {{"synthG-q4_0.gguf", WeightFormat::q4_0(), q8_0},
                 {"l3-tiny-q4_0.gguf", WeightFormat::q4_0(), q8_0},
                 {"synthG-q8_0.gguf", q8_0, std::nullopt}};
    for (const auto& [name, layers, table] : files) {
        SCOPED_TRACE(name);
        const GgufFile file = GgufFile::open(gguf(shared, name).string());
        const Checkpoint g = Checkpoint::open(gguf(shared, name).string());
        EXPECT_EQ(g.config().weight_format, layers);
        EXPECT_EQ(g.config().table_format, table);
        EXPECT_EQ(g.classifier().format, table.value_or(layers));
        EXPECT_EQ(g.embedding_weights().format, table.value_or(layers));
        EXPECT_TRUE(g.load_note().empty());
        const auto check = [&](const WeightTensor& w, const char* tensor) {
            const GgufTensor* t = file.tensor(tensor);
            ASSERT_NE(t, nullptr) << tensor;
            std::vector<float> expected(t->elements()), got(t->elements());
            ggml_dequantize(static_cast<GgmlType>(t->type), t->data, expected.data(), t->elements());
            dequantize(got.data(), w, t->elements());
            EXPECT_EQ(std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)), 0) << tensor;
        };
        check(g.layer(1).w2, "blk.1.ffn_down.weight");
        check(g.layer(0).wk, "blk.0.attn_k.weight");
        check(g.embedding_weights(), "token_embd.weight");
        if (!g.config().shared_classifier) check(g.classifier(), "output.weight");
    }
}

// A Q6_K classifier makes the embedding and the classifier f32 (the Q4_0 embedding widened beside it) and
// leaves the layers Q4_0.
TEST(GgufModel, OtherTypesAreDequantizedToF32AndSaySo) {
    LLAMACL_REQUIRE_SHARED(shared);
    const Checkpoint g = Checkpoint::open(gguf(shared, "synthK-q4_0.gguf").string());
    EXPECT_EQ(g.config().weight_format, WeightFormat::q4_0());
    EXPECT_EQ(g.config().classifier_format(), (WeightFormat{ElementType::f32, 0}));
    EXPECT_NE(g.load_note().find("Q6_K"), std::string::npos) << g.load_note();
    EXPECT_NE(g.load_note().find("Q4_0"), std::string::npos) << g.load_note();
    const GgufFile file = GgufFile::open(gguf(shared, "synthK-q4_0.gguf").string());
    const GgufTensor* out = file.tensor("output.weight");
    ASSERT_NE(out, nullptr);
    std::vector<float> expected(out->elements());
    ggml_dequantize(GgmlType::q6_k, out->data, expected.data(), out->elements());
    EXPECT_EQ(std::memcmp(expected.data(), g.classifier().f32(), expected.size() * sizeof(float)), 0);
}

// run.c's flags on the GGUF conversion print what the llama2.c file prints: the same weights and math.
// The GGUF's context (128) is shorter than stories260K.bin's, so both run at most that many positions.
TEST(GgufModel, GenerateMatchesTheLlama2cFileForEveryReferenceFlagSet) {
    LLAMACL_REQUIRE_SHARED(shared);
    const std::map<std::string, std::string> pairs = {{"stories260K.bin", "stories260K-f32.gguf"}};
    int cases = 0;
    for (const ReferenceCase& rc : load_cases(shared)) {
        if (!pairs.count(rc.model)) continue;
        ReferenceCase limited = rc;
        limited.steps = std::to_string(std::min(std::stoi(rc.steps), 128));
        const CommandResult bin = run_llama_cl(generate_args(shared, limited, "--backend cpu"));
        ASSERT_EQ(bin.exit_code, 0) << bin.err;
        const std::string expected = read_file(shared / "reference" / rc.expected);
        EXPECT_EQ(expected.compare(0, bin.out.size() - 1, bin.out, 0, bin.out.size() - 1), 0)
            << rc.id << ": run.c's text begins with the .bin's at -n " << limited.steps;
        for (const char* backend : {"--backend cpu", "--backend opencl"}) {
            ReferenceCase g = limited;
            g.model = "gguf/" + pairs.at(rc.model);
            const CommandResult got = run_llama_cl(generate_args(shared, g, backend));
            ASSERT_EQ(got.exit_code, 0) << got.err;
            EXPECT_EQ(got.out, bin.out) << rc.id << " " << backend;
        }
        ++cases;
    }
    EXPECT_GE(cases, 4);
}

TEST(GgufModel, SynthGGenerateMatchesItsLlama2cFile) {
    LLAMACL_REQUIRE_SHARED(shared);
    const std::string tok = quote((shared / "models" / "tok512.bin").string());
    for (const char* flags : {"-t 0 -n 100 -i Once", "-t 1.0 -p 0.9 -s 3 -n 100", "-t 0.8 -p 0 -s 7 -n 64 -i The"}) {
        const CommandResult bin =
            run_llama_cl("generate " + quote(gguf(shared, "synthG.bin").string()) + " -z " + tok + " --backend cpu " + flags);
        ASSERT_EQ(bin.exit_code, 0) << bin.err;
        const CommandResult g = run_llama_cl("generate " + quote(gguf(shared, "synthG-f32.gguf").string()) +
                                             " --backend cpu " + flags);
        ASSERT_EQ(g.exit_code, 0) << g.err;
        EXPECT_EQ(g.out, bin.out) << flags;
    }
}

// check climbs its ladder on a GGUF model: f32 and f16, not q8_0, whose blocks of 32 do not fit rows of 172.
TEST(GgufModel, CheckClimbsTheLadderInTheFormatsItsRowsAllow) {
    LLAMACL_REQUIRE_SHARED(shared);
    const CommandResult r = run_llama_cl("check " + quote(gguf(shared, "stories260K-f32.gguf").string()));
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("generate:f16"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("q8_0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check: passed"), std::string::npos) << r.out;
}

double tolerance(const std::string& model) {
    if (model.find("-f32") != std::string::npos) return 1e-6;
    if (model.find("-f16") != std::string::npos) return 5e-4;
    if (model.find("synthK") != std::string::npos) return 1e-3;  // its Q6_K classifier runs dequantized
    return 2e-4;
}

void expect_llama_cpp_nll(const std::string& backend) {
    LLAMACL_REQUIRE_SHARED(shared);
    const std::vector<ExpectedNll> rows = llama_cpp_nlls(shared);
    ASSERT_GE(rows.size(), 11u);
    for (const ExpectedNll& e : rows) {
        const CommandResult r = run_llama_cl("perplexity " + quote(gguf(shared, e.model).string()) + " -f " +
                                             quote((shared / "reference" / "gguf" / "text1.txt").string()) +
                                             " --json " + backend);
        ASSERT_EQ(r.exit_code, 0) << e.model << ": " << r.err;
        const nlohmann::json j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["tokens"].get<int>(), e.tokens) << e.model;
        const double got = j["mean_nll"].get<double>();
        EXPECT_LE(std::fabs(got - e.mean_nll) / e.mean_nll, tolerance(e.model))
            << e.model << " on " << backend << ": mean nll " << got << ", llama.cpp's " << e.mean_nll;
    }
}

TEST(GgufModel, PerplexityIsLlamaCppsOnTheReference) { expect_llama_cpp_nll("--backend cpu"); }
TEST(GgufModel, PerplexityIsLlamaCppsOnOpenCL) { expect_llama_cpp_nll("--backend opencl"); }

// A classifier whose format is not the layers' runs on kernels of its own: the exact shape gives the
// reference's NLL and greedy text bit for bit. The default shape runs it per-op (the token kernel reads
// one format) and says why.
TEST(GgufModel, AClassifierOfItsOwnFormatRunsExactlyOnOpenCL) {
    LLAMACL_REQUIRE_SHARED(shared);
    const std::string text = quote((shared / "reference" / "gguf" / "text1.txt").string());
    for (const char* name : {"synthG-q4_0.gguf", "l3-tiny-q4_0.gguf", "synthK-q4_0.gguf"}) {
        SCOPED_TRACE(name);
        const std::string model = quote(gguf(shared, name).string());
        ASSERT_TRUE(Checkpoint::open(gguf(shared, name).string()).config().table_format);
        const CommandResult ref = run_llama_cl("perplexity " + model + " -f " + text + " --json --backend cpu");
        const CommandResult dev =
            run_llama_cl("perplexity " + model + " -f " + text + " --json --backend opencl --work-shape exact");
        ASSERT_EQ(ref.exit_code, 0) << ref.err;
        ASSERT_EQ(dev.exit_code, 0) << dev.err;
        EXPECT_EQ(nlohmann::json::parse(dev.out)["mean_nll"], nlohmann::json::parse(ref.out)["mean_nll"]);

        const std::string greedy = "generate " + model + " -t 0 -n 24 -i " + quote("Once upon a time");
        const CommandResult ref_text = run_llama_cl(greedy + " --backend cpu");
        const CommandResult dev_text = run_llama_cl(greedy + " --backend opencl --work-shape exact");
        ASSERT_EQ(ref_text.exit_code, 0) << ref_text.err;
        ASSERT_EQ(dev_text.exit_code, 0) << dev_text.err;
        EXPECT_EQ(dev_text.out, ref_text.out);
        const CommandResult schedule = run_llama_cl("generate " + model + " -n 2 -v --backend opencl");
        ASSERT_EQ(schedule.exit_code, 0) << schedule.err;
        EXPECT_NE(schedule.err.find("per-op (one kernel launch per step: the classifier's weights are"),
                  std::string::npos)
            << schedule.err;
    }
}


// expected.tsv's greedy rows: BOS and the prompt's ids, then llama.cpp's 16 greedy ids. The prompt must
// tokenize to its ids, and generate -t 0 must print the text of all of them.
void expect_llama_cpp_greedy(const std::string& backend) {
    LLAMACL_REQUIRE_SHARED(shared);
    std::ifstream in(shared / "reference" / "gguf" / "expected.tsv");
    int rows = 0;
    for (std::string line; std::getline(in, line);) {
        std::istringstream fields(line);
        std::string model, kind, prompt, ids_text;
        std::getline(fields, model, '\t');
        std::getline(fields, kind, '\t');
        std::getline(fields, prompt, '\t');
        std::getline(fields, ids_text, '\t');
        if (kind != "greedy16") continue;
        SCOPED_TRACE(model + " \"" + prompt + "\" " + backend);
        std::vector<int> ids;
        std::istringstream id_stream(ids_text);
        for (int id; id_stream >> id;) ids.push_back(id);
        const std::string path = gguf(shared, model).string();
        const CommandResult tokens = run_llama_cl("tokenize " + quote(path) + " " + quote(prompt));
        ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
        std::istringstream prompt_ids(tokens.out);
        std::size_t n = 0;
        for (int id; prompt_ids >> id; ++n) EXPECT_EQ(id, ids.at(n)) << "prompt token " << n;
        ASSERT_EQ(n + 16, ids.size());
        const Tokenizer vocabulary = Tokenizer::from_gguf(GgufFile::open(path), 0);
        PieceWriter writer(vocabulary.byte_level());
        std::string text;
        for (std::size_t i = 1; i < ids.size(); ++i) text += writer.push(vocabulary.decode(ids[i - 1], ids[i]), false);
        const CommandResult r = run_llama_cl("generate " + quote(path) + " -t 0 -n " + std::to_string(ids.size() - 1) +
                                             " -i " + quote(prompt) + " " + backend);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, text + "\n");
        ++rows;
    }
    EXPECT_EQ(rows, 4);
}

TEST(GgufModel, GreedyIdsAreLlamaCppsOnTheReference) { expect_llama_cpp_greedy("--backend cpu"); }
TEST(GgufModel, GreedyIdsAreLlamaCppsOnOpenCL) { expect_llama_cpp_greedy("--backend opencl"); }

// A small model with stories260K's vocabulary, for the loader's refusals: each test breaks one thing.
struct GgufLoader : ::testing::Test {
    TempDir dir;
    Config c{16, 32, 2, 2, 1, 512, 32, true};

    GgufBuilder builder() {
        // (Each test has required the shared data first.)
        vocabulary = std::make_unique<GgufFile>(GgufFile::open(gguf(*shared_dir(), "stories260K-f32.gguf").string()));
        return llama_gguf(c, *vocabulary, [](const std::string&, std::uint64_t i) {
            return static_cast<float>(static_cast<int>(i * 2654435761u % 2001) - 1000) / 4000.0f;
        });
    }
    // Writes `image` and expects one line naming the file and every one of `words`, exit 1, nothing on stdout.
    void expect_refused(const GgufBytes& image, std::initializer_list<const char*> words) {
        const auto path = dir / "model.gguf";
        GgufBuilder::write_file(path, image);
        for (const char* command : {"info ", "generate "}) {
            const CommandResult r = run_llama_cl(command + quote(path.string()) +
                                                 (command[0] == 'g' ? " -n 4 --backend cpu" : ""));
            EXPECT_EQ(r.exit_code, 1) << command << r.err;
            EXPECT_TRUE(r.out.empty()) << r.out;
            EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
            EXPECT_NE(r.err.find(path.string()), std::string::npos) << r.err;
            for (const char* w : words) EXPECT_NE(r.err.find(w), std::string::npos) << w << " in " << r.err;
        }
    }
    // `image` with the first `from` replaced by `to` (the same length).
    static GgufBytes patched(GgufBytes image, std::string_view from, std::string_view to) {
        const std::string_view text(reinterpret_cast<const char*>(image.data()), image.size());
        const std::size_t at = text.find(from);
        EXPECT_NE(at, std::string_view::npos) << from;
        if (at != std::string_view::npos) std::memcpy(image.data() + at, to.data(), to.size());
        return image;
    }
    std::unique_ptr<GgufFile> vocabulary;
};

TEST_F(GgufLoader, AWellFormedModelRuns) {
    LLAMACL_REQUIRE_SHARED(shared);
    builder().write(dir / "model.gguf");
    const CommandResult r = run_llama_cl("generate " + quote((dir / "model.gguf").string()) + " -n 8 -s 1 --backend cpu");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const CommandResult info = run_llama_cl("info " + quote((dir / "model.gguf").string()));
    EXPECT_EQ(info.exit_code, 0) << info.err;
    EXPECT_NE(info.out.find("format: GGUF version 3"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("tensor types: F32 20"), std::string::npos) << info.out;
    EXPECT_NE(info.out.find("vocabulary: SentencePiece, 512 tokens"), std::string::npos) << info.out;
}

TEST_F(GgufLoader, AnotherArchitectureIsNamed) {
    LLAMACL_REQUIRE_SHARED(shared);
    const GgufBytes image = builder().build();
    expect_refused(patched(image, "\x05\0\0\0\0\0\0\0llama", std::string_view("\x05\0\0\0\0\0\0\0mamba", 13)),
                   {"\"mamba\"", "Llama"});
}

TEST_F(GgufLoader, AMissingKeyIsNamed) {
    LLAMACL_REQUIRE_SHARED(shared);
    expect_refused(patched(builder().build(), "llama.block_count", "llama.block_counx"), {"llama.block_count", "missing"});
}

TEST_F(GgufLoader, AMissingTensorIsNamed) {
    LLAMACL_REQUIRE_SHARED(shared);
    expect_refused(patched(builder().build(), "blk.1.ffn_up.weight", "blk.1.ffn_uq.weight"), {"blk.1.ffn_up.weight"});
}

TEST_F(GgufLoader, ATensorOfTheWrongShapeIsNamed) {
    LLAMACL_REQUIRE_SHARED(shared);
    GgufBuilder b = builder();
    for (auto& t : b.tensors())
        if (t.name == "blk.0.attn_k.weight") std::swap(t.dims[0], t.dims[1]);
    expect_refused(b.build(), {"blk.0.attn_k.weight", "8 x 16", "16 x 8"});
}

TEST_F(GgufLoader, ATypeItCannotReadIsNamed) {
    LLAMACL_REQUIRE_SHARED(shared);
    GgufBuilder b = builder();
    for (auto& t : b.tensors())
        if (t.name == "blk.0.attn_q.weight") t.type = static_cast<std::uint32_t>(GgmlType::i32);
    expect_refused(b.build(), {"blk.0.attn_q.weight", "I32"});
}

TEST_F(GgufLoader, AnAbsurdCountIsRefused) {
    LLAMACL_REQUIRE_SHARED(shared);
    const GgufBytes image = builder().build();
    const std::string_view text(reinterpret_cast<const char*>(image.data()), image.size());
    GgufBytes broken = image;
    const std::size_t at = text.find("llama.block_count") + std::string_view("llama.block_count").size();
    put<std::uint32_t>(broken, at + 4, 0x7fffffff);
    expect_refused(broken, {"llama.block_count", "2147483647"});
}

TEST_F(GgufLoader, AVocabularySmallerThanTheEmbeddingIsRefused) {
    LLAMACL_REQUIRE_SHARED(shared);
    c.vocab_size = 600;
    expect_refused(builder().build(), {"512 tokens", "600"});
}

}  // namespace
