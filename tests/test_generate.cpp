// End to end through the binary: run.c's reference outputs, byte for byte, and the generation contract.
#include <gtest/gtest.h>

#include <algorithm>

#include "models.hpp"
#include "reference_cases.hpp"

using namespace llamacl::test;

TEST(GenerateCpu, EveryReferenceCaseIsByteIdentical) {
    LLAMACL_REQUIRE_SHARED(shared);
    const auto cases = load_cases(shared);
    ASSERT_FALSE(cases.empty());
    for (const ReferenceCase& c : cases) {
        const CommandResult r = run_llama_cl(generate_args(shared, c, "--backend cpu"));
        EXPECT_EQ(r.exit_code, 0) << c.id << ": " << r.err;
        EXPECT_EQ(r.out, read_file(shared / "reference" / c.expected)) << "case " << c.id;
    }
}

TEST(GenerateCpu, V1CheckpointGeneratesWhatV0Does) {
    LLAMACL_REQUIRE_SHARED(shared);
    for (const ReferenceCase& c : load_cases(shared)) {
        if (c.model != "stories260K.bin") continue;
        ReferenceCase v1 = c;
        v1.model = "stories260K.v1.bin";
        const CommandResult r = run_llama_cl(generate_args(shared, v1, "--backend cpu"));
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_EQ(r.out, read_file(shared / "reference" / c.expected)) << "case " << c.id << " on the v1 file";
    }
}

TEST(GenerateCpu, TokenizeMatchesRunCsIds) {
    LLAMACL_REQUIRE_SHARED(shared);
    const CommandResult r = run_llama_cl("tokenize " + quote((shared / "models/tok512.bin").string()) + " 'Once upon a time'");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string ids = read_file(shared / "reference/tokenizer/ids-tok512.bin.txt");
    EXPECT_EQ(r.out, ids.substr(0, ids.find('\n') + 1));
}

TEST(GenerateCpu, SeedsSampleDeterministically) {
    TempDir dir;
    const auto model = write_model(dir, small_config());
    const std::string base = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -t 1 -p 0.9 -n 30 --backend cpu";
    const CommandResult a = run_llama_cl(base + " -s 5"), b = run_llama_cl(base + " -s 5"), c = run_llama_cl(base + " -s 6");
    EXPECT_EQ(a.exit_code, 0) << a.err;
    EXPECT_EQ(a.out, b.out);
    EXPECT_NE(a.out, c.out);
}

TEST(GenerateCpu, BadArgumentsAreOneLineUsageErrors) {
    TempDir dir;
    const auto model = write_model(dir, small_config());
    const std::string base = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) + " --backend cpu";
    for (const char* flags : {"-t -1", "-p 1.5", "-p -0.1", "-n -3", "--backend gpu", "-n abc"}) {
        const CommandResult r = run_llama_cl(base + " " + flags);
        EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.err;
        EXPECT_EQ(r.out, "") << flags;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << flags << ": " << r.err;
    }
}

TEST(GenerateCpu, PromptLongerThanStepsOrContextIsRejectedBeforeAnyOutput) {
    TempDir dir;
    const auto model = write_model(dir, small_config());  // seq_len 40
    const std::string base = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) + " --backend cpu";
    const CommandResult steps = run_llama_cl(base + " -n 3 -i 'a long prompt of many tokens'");
    EXPECT_EQ(steps.exit_code, 2);
    EXPECT_NE(steps.err.find("-n"), std::string::npos) << steps.err;
    EXPECT_EQ(steps.out, "");
    const std::string long_prompt(200, 'x');
    const CommandResult context = run_llama_cl(base + " -i " + long_prompt);
    EXPECT_EQ(context.exit_code, 1);
    EXPECT_NE(context.err.find("seq_len"), std::string::npos) << context.err;
    EXPECT_EQ(context.out, "");
}

TEST(GenerateCpu, TokenizerSmallerThanTheVocabularyIsRejected) {
    TempDir dir;
    const auto model = write_model(dir, small_config());
    llamacl::write_synthetic_tokenizer((dir / "small.bin").string(), 260);
    const CommandResult r = run_llama_cl("generate " + quote(model.string()) + " -z " + quote((dir / "small.bin").string()));
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("small.bin"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
}

TEST(Info, PrintsTheMemoryContract) {
    TempDir dir;
    const llamacl::Config c = small_config(2, false);
    const auto model = write_model(dir, c, 1);
    const CommandResult r = run_llama_cl("info " + quote(model.string()));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const llamacl::ModelSize size(c);
    const std::vector<std::string> expected = {
        "format: llama2.c version 1", "n_kv_heads: 2", "shared_classifier: no",
          "parameters: " + std::to_string(size.total_params), "weight bytes: " + std::to_string(size.weight_bytes()),
          "bytes per layer: " + std::to_string(size.layer_bytes()),
        "kv cache bytes (full context): " + std::to_string(size.kv_cache_bytes),
        "kv cache bytes per position: " + std::to_string(size.kv_cache_bytes / c.seq_len),
        "cpu reference activation bytes: " + std::to_string(size.reference_activation_bytes)};
    for (const std::string& expect : expected)
        EXPECT_NE(r.out.find(expect), std::string::npos) << expect << "\n" << r.out;
}
