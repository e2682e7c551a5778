// The command line as a new user meets it: a tokenizer that does not fit the model.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>

#include "llamacl/synthetic.hpp"
#include "models.hpp"

using namespace llamacl::test;

TEST(VocabFit, AnotherModelsTokenizerIsRefusedNamingBothSizes) {
    TempDir dir;
    const auto model = write_model(dir, small_config());  // a vocabulary of 300
    const auto larger = dir / "larger.bin";
    llamacl::write_synthetic_tokenizer(larger.string(), 512);
    const std::string flags = quote(model.string()) + " --backend cpu -z ";
    const std::pair<std::string, std::string> commands[] = {
        {"generate", " -t 0 -n 12"}, {"chat", " -t 0 -n 12 -y '' -i hi"}, {"perplexity", " -f /dev/null"}};
    for (const auto& [command, input] : commands)
        expect_error(run_llama_cl(command + " " + flags + quote(larger.string()) + input), 1,
                     {larger.string(), "512 entries", "vocabulary is 300 tokens", "model's own tokenizer with -z",
                      "--allow-vocab-mismatch"},
                     command);
    // run.c's behaviour on request: the extra entries are ids the model never emits.
    const CommandResult allowed = run_llama_cl("generate " + flags + quote(larger.string()) + " -t 0 -n 12 --allow-vocab-mismatch");
    const CommandResult own = run_llama_cl("generate " + flags + quote((dir / "tok.bin").string()) + " -t 0 -n 12");
    ASSERT_EQ(own.exit_code, 0) << own.err;
    EXPECT_EQ(allowed.exit_code, 0) << allowed.err;
    EXPECT_EQ(allowed.out, own.out);
}

// The most common first mistake: stories260K with the 32,000-entry tokenizer.bin, run.c's default -z.
TEST(VocabFit, Stories260KWithTheDefaultTokenizerIsRefused) {
    LLAMACL_REQUIRE_SHARED(shared);
    TempDir dir;
    std::filesystem::create_symlink(shared / "models/tokenizer.bin", dir / "tokenizer.bin");
    const CommandResult r = run_command("cd " + quote(dir.path().string()) + " && " + quote(LLAMACL_BINARY) + " generate " +
                                        quote((shared / "models/stories260K.bin").string()) + " --backend cpu -n 8");
    expect_error(r, 1, {"tokenizer.bin", "32000 entries", "vocabulary is 512 tokens", "-z", "no -z was given"},
                 "stories260K, default tokenizer");
}

