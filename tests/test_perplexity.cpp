// perplexity: the mean NLL against an independent double-precision computation from the CPU reference's
// logits (each scored token's own window run from scratch), its windows, and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "llamacl/device_forward.hpp"
#include "llamacl/perplexity.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/tokenizer.hpp"
#include "models.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

// vocab 400: the synthetic tokenizer has " e", so the text "e" is one token
const Config kConfig{48, 100, 3, 6, 2, 400, 40, true};
const std::string kText =
    "the cat sat on the mat and then it ran to the tree where a bird sang a song about the rain";

struct PerplexityModel : ::testing::Test {
    TempDir dir;
    std::filesystem::path model = write_model(dir, kConfig);
    std::string tokenizer = (dir / "tok.bin").string();

    std::filesystem::path text_file(const std::string& text) {
        const auto path = dir / "text.txt";
        std::ofstream(path, std::ios::binary) << text;
        return path;
    }
    CommandResult run(const std::string& text, const std::string& flags) {
        return run_llama_cl("perplexity " + quote(model.string()) + " -z " + quote(tokenizer) + " -f " +
                            quote(text_file(text).string()) + " " + flags);
    }
    // The mean NLL by the definition: text token i (1-based) is scored by window k = 0 when i <= context,
    // else ceil((i - context) / stride), which starts at text token s = 1 + k * stride; its context is
    // BOS, then text tokens s .. i - 1, run from position 0 here for every token on its own.
    double expected_mean_nll(const std::string& text, int context, int stride) {
        const std::vector<int> t = Tokenizer::load(tokenizer, 0).encode(text, true, false);
        const Checkpoint ck = Checkpoint::open(model.string());
        ReferenceForward reference(ck);
        const int n = static_cast<int>(t.size()) - 1;
        double total = 0;
        for (int i = 1; i <= n; ++i) {
            const int k = i <= context ? 0 : (i - context + stride - 1) / stride;
            const int s = 1 + k * stride;
            std::span<float> logits = reference.forward(t[0], 0);
            for (int j = s; j < i; ++j) logits = reference.forward(t[j], j - s + 1);
            double sum = 0;
            for (float l : logits) sum += std::exp(static_cast<double>(l));
            total += std::log(sum) - logits[t[i]];
        }
        return total / n;
    }
    int text_tokens(const std::string& text) {
        return static_cast<int>(Tokenizer::load(tokenizer, 0).encode(text, true, false).size()) - 1;
    }
};

void expect_matches(PerplexityModel& m, const std::string& flags, double tolerance) {
    for (const auto& [context, stride] : {std::pair{40, 40}, {8, 3}, {8, 8}, {5, 1}}) {
        const CommandResult r =
            m.run(kText, flags + " --json --context " + std::to_string(context) + " --stride " + std::to_string(stride));
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const nlohmann::json j = nlohmann::json::parse(r.out);
        const double expected = m.expected_mean_nll(kText, context, stride);
        EXPECT_EQ(j["tokens"].get<int>(), m.text_tokens(kText));
        EXPECT_NEAR(j["mean_nll"].get<double>(), expected, expected * tolerance) << context << "/" << stride;
        EXPECT_NEAR(j["perplexity"].get<double>(), std::exp(expected), std::exp(expected) * tolerance * 10);
        EXPECT_EQ(j["context"].get<int>(), context);
        EXPECT_EQ(j["stride"].get<int>(), stride);
    }
}

}  // namespace

TEST_F(PerplexityModel, CpuMatchesTheReferencesLogitsInDouble) { expect_matches(*this, "--backend cpu", 1e-5); }

TEST_F(PerplexityModel, OpenclMatchesTheReferencesLogitsInDouble) { expect_matches(*this, "--backend opencl", 1e-4); }

TEST_F(PerplexityModel, DefaultWindowsSpanTheContextWithoutOverlap) {
    const int n = text_tokens(kText);
    ASSERT_GT(n, kConfig.seq_len);  // more than one window
    const CommandResult r = run(kText, "--backend cpu --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["context"].get<int>(), kConfig.seq_len);
    EXPECT_EQ(j["windows"].get<int>(), (n + kConfig.seq_len - 1) / kConfig.seq_len);
    EXPECT_EQ(j["positions"].get<int>(), n);  // every position runs once
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos) << r.err;
    const CommandResult text = run(kText, "--backend cpu");
    EXPECT_EQ(text.out.rfind("tokens: " + std::to_string(n) + "\nmean nll: ", 0), 0u) << text.out;
}

TEST_F(PerplexityModel, OneTokenIsPredictedFromBosAlone) {
    ASSERT_EQ(text_tokens("e"), 1);
    const CommandResult r = run("e", "--backend cpu --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["tokens"].get<int>(), 1);
    EXPECT_EQ(j["positions"].get<int>(), 1);
    const double expected = expected_mean_nll("e", kConfig.seq_len, kConfig.seq_len);
    EXPECT_NEAR(j["mean_nll"].get<double>(), expected, expected * 1e-5);
}

TEST_F(PerplexityModel, EmptyTextsMissingFilesAndBadWindowsAreOneLineErrors) {
    const CommandResult empty = run("", "--backend cpu");
    EXPECT_EQ(empty.exit_code, 1);
    EXPECT_NE(empty.err.find("the text is empty"), std::string::npos) << empty.err;
    EXPECT_EQ(empty.out, "");
    // A NUL would end the tokenizer's C string: the rest would go unscored (UTF-16 has one in every other byte).
    const CommandResult utf16 = run(std::string("h\0e\0l\0l\0o\0", 10), "--backend cpu");
    EXPECT_EQ(utf16.exit_code, 1);
    EXPECT_NE(utf16.err.find("a NUL byte at offset 1: not UTF-8 text (UTF-16?)"), std::string::npos) << utf16.err;
    EXPECT_EQ(std::count(utf16.err.begin(), utf16.err.end(), '\n'), 1) << utf16.err;
    EXPECT_EQ(utf16.out, "");
    const CommandResult missing = run_llama_cl("perplexity " + quote(model.string()) + " -z " + quote(tokenizer) +
                                               " -f " + quote((dir / "none.txt").string()));
    EXPECT_EQ(missing.exit_code, 1);
    EXPECT_NE(missing.err.find("none.txt: cannot read the text"), std::string::npos) << missing.err;
    const CommandResult directory = run_llama_cl("perplexity " + quote(model.string()) + " -z " + quote(tokenizer) +
                                                 " -f " + quote(dir.path().string()));
    EXPECT_EQ(directory.exit_code, 1) << directory.err;
    const CommandResult no_file = run_llama_cl("perplexity " + quote(model.string()) + " -z " + quote(tokenizer));
    EXPECT_EQ(no_file.exit_code, 2);
    EXPECT_NE(no_file.err.find("-f"), std::string::npos) << no_file.err;
    for (const char* flags : {"--context 41", "--context 8 --stride 9", "--stride 0", "--context 0", "--context x"}) {
        const CommandResult r = run(kText, std::string("--backend cpu ") + flags);
        EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
        EXPECT_EQ(r.out, "") << flags;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << ": " << r.err;
    }
}

TEST(Perplexity, TokenNllIsTheLogSoftmaxInDouble) {
    const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 100.0f};
    EXPECT_NEAR(token_nll(logits, 0), 99.0, 1e-12);  // exp(100) alone would overflow a float
    const std::vector<float> even = {0.5f, 0.5f, 0.5f, 0.5f};
    EXPECT_NEAR(token_nll(even, 2), std::log(4.0), 1e-15);
}

// The bound docs/benchmarks.md states for --prompt-precision fast: its mean NLL within 2^-10 of exact's,
// relatively, the error bound of one TF32 product (an operand's 2^-11 twice). Not a theorem (the model's
// norms and softmax could amplify the products' errors), but what single-pass TF32 should keep.
constexpr double kFastNllBound = 0x1p-10;

// --prompt-precision fast against exact on stories260K (a trained model) over the shared text, in one
// window, the prompt's GEMMs on tensor cores (emulated here, as the "gpu" shape runs them on NVIDIA's GPUs):
// fast's mean NLL moves, by at most kFastNllBound of exact's (docs/benchmarks.md states it). Without tensor
// cores fast has nothing to change: the same NLL, to the bit.
TEST(PromptPrecision, FastMovesTheNllWithinItsBound) {
    LLAMACL_REQUIRE_SHARED(shared);
    const Checkpoint ck = Checkpoint::open((shared / "models/stories260K.bin").string());
    std::ifstream file(shared / "reference/gguf/text1.txt", std::ios::binary);
    const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    const std::vector<int> tokens =
        Tokenizer::load((shared / "models/tok512.bin").string(), ck.config().vocab_size).encode(text, true, false);
    const int context = static_cast<int>(tokens.size());
    ASSERT_LE(context, ck.config().seq_len);
    Device device = Device::open("", "");
    const auto mean_nll = [&](TensorCores tensor_cores, PromptPrecision precision) {
        DeviceOptions options;
        options.shape = parse_launch_shape("gpu", device.info());
        options.tensor_cores = tensor_cores;
        options.prompt_precision = precision;
        DeviceForward model(device, ck, options);
        EXPECT_EQ(model.prompt_precision(), tensor_cores == TensorCores::never ? PromptPrecision::exact : precision);
        return perplexity(model, tokens, {context, context}).mean_nll;
    };
    const double exact = mean_nll(TensorCores::emulated, PromptPrecision::exact);
    const double fast = mean_nll(TensorCores::emulated, PromptPrecision::fast);
    std::printf("stories260K, %d tokens: mean NLL exact %.9f, fast %.9f, difference %.3g (relative %.3g)\n",
                context - 1, exact, fast, fast - exact, (fast - exact) / exact);
    EXPECT_NE(fast, exact);
    EXPECT_LE(std::fabs(fast - exact), kFastNllBound * exact);
    EXPECT_EQ(mean_nll(TensorCores::never, PromptPrecision::fast), mean_nll(TensorCores::never, PromptPrecision::exact));
}
