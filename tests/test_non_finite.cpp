// Non-finite numbers: a NaN or infinite weight, or an f16 conversion that overflows, ends a run with one
// line that names where, never garbage with exit 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <vector>

#include "models.hpp"
#include "support.hpp"

namespace llamacl::test {
namespace {

constexpr std::uint64_t kHeaderBytes = 28;  // a version-0 checkpoint's seven int32s

// The byte offset of weight `index` of layer 0's wq in a version-0 checkpoint of `c`: after the embedding
// table and every layer's rms_att_weight (llama2.c's legacy order).
std::uint64_t wq_offset(const Config& c, std::uint64_t index) {
    const auto dim = static_cast<std::uint64_t>(c.dim), layers = static_cast<std::uint64_t>(c.n_layers);
    return kHeaderBytes + (static_cast<std::uint64_t>(c.vocab_size) * dim + layers * dim + index) * 4;
}

void write_float(const std::filesystem::path& path, std::uint64_t offset, float value) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(reinterpret_cast<const char*>(&value), sizeof value);
    ASSERT_TRUE(f.good());
}

// Every weight of the file NaN.
void all_nan(const std::filesystem::path& path) {
    const auto floats = (std::filesystem::file_size(path) - kHeaderBytes) / 4;
    const std::vector<float> nan(floats, std::numeric_limits<float>::quiet_NaN());
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(kHeaderBytes));
    f.write(reinterpret_cast<const char*>(nan.data()), static_cast<std::streamsize>(nan.size() * sizeof(float)));
    ASSERT_TRUE(f.good());
}

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

class NonFinite : public ::testing::Test {
protected:
    TempDir dir;
    const Config c = small_config();
    const std::filesystem::path model = write_model(dir, c);
    const std::string tokenizer = (dir / "tok.bin").string();
    std::string run_args(const std::string& command) const {
        return command + " " + quote(model.string()) + " -z " + quote(tokenizer);
    }
};

// On a device too, greedy decoding's argmax included (-t 0: the logits stay on the device), on each
// schedule.
TEST_F(NonFinite, GenerateEndsAtTheFirstNonFiniteLogit) {
    write_float(model, wq_offset(c, 5), std::numeric_limits<float>::quiet_NaN());
    for (const std::string backend : {"--backend cpu", "--backend opencl", "--backend opencl --schedule per-op",
                                      "--backend opencl --work-shape gpu"})
    for (const char* t : {"0", "1"}) {
        SCOPED_TRACE(backend + " -t " + t);
        const CommandResult r = run_llama_cl(run_args("generate") + " -n 8 " + backend + " -t " + t);
        EXPECT_EQ(r.exit_code, 1) << r.err;
        EXPECT_EQ(r.out, "");
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find("position 0: the logits hold NaN"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("llama-cl check"), std::string::npos) << r.err;
    }
}

TEST_F(NonFinite, PerplexityPrintsNothingOnStdout) {
    all_nan(model);
    const auto text = dir / "text.txt";
    std::ofstream(text) << "one two three four";
    for (const char* json : {"", " --json"}) {
        const CommandResult r =
            run_llama_cl(run_args("perplexity") + " --backend cpu -f " + quote(text.string()) + json);
        EXPECT_EQ(r.exit_code, 1) << r.err;
        EXPECT_EQ(r.out, "");
        EXPECT_EQ(lines(r.err), 1u) << r.err;
        EXPECT_NE(r.err.find("position 0: the logits hold NaN"), std::string::npos) << r.err;
    }
}

TEST_F(NonFinite, CheckFailsAnAllNaNModel) {
    all_nan(model);
    const CommandResult r = run_llama_cl(run_args("check"));
    EXPECT_EQ(r.exit_code, 4) << r.out << r.err;
}

TEST_F(NonFinite, CompareCpuReportsNaNAsADivergence) {
    write_float(model, wq_offset(c, 5), std::numeric_limits<float>::quiet_NaN());
    const CommandResult r = run_llama_cl(run_args("generate") + " -n 4 -t 0 --backend opencl --compare-cpu");
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("compare-cpu: first divergence at token 0, layer 0, q"), std::string::npos) << r.err;
}

TEST_F(NonFinite, WeightsF16RefusesAWeightItsHalvesCannotHold) {
    write_float(model, wq_offset(c, 5), 1e6f);
    const CommandResult r = run_llama_cl(run_args("generate") + " -n 4 --backend cpu --weights f16");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("wq of layer 0 holds a weight of magnitude 1e+06"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--weights f32"), std::string::npos) << r.err;
}

TEST_F(NonFinite, WeightsConversionRefusesANonFiniteWeight) {
    write_float(model, wq_offset(c, 5), std::numeric_limits<float>::quiet_NaN());
    const CommandResult r = run_llama_cl(run_args("generate") + " -n 4 --backend cpu --weights q8_0");
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(lines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find("wq of layer 0 holds NaN (element 5)"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace llamacl::test
