// The command line as a new user meets it: a tokenizer that does not fit the model,
// misspelled options, run.c's flags by long names, run.c's command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llamacl/option_suggestion.hpp"
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

TEST(OptionSuggestion, TheNearestOptionOfTheCommand) {
    const std::vector<std::vector<std::string>> options = {
        {"-h", "--help"}, {"-t", "--temperature"}, {"-p", "--top-p"}, {"-s", "--seed"}, {"-n", "--steps"}, {"--tolerance"}};
    EXPECT_EQ(llamacl::nearest_option("--temp", options), "-t/--temperature");        // a beginning
    EXPECT_EQ(llamacl::nearest_option("--top_p", options), "-p/--top-p");             // llama.cpp's underscore
    EXPECT_EQ(llamacl::nearest_option("--TEMPERATURE", options), "-t/--temperature");  // case
    EXPECT_EQ(llamacl::nearest_option("--temprature", options), "-t/--temperature");  // a letter left out
    EXPECT_EQ(llamacl::nearest_option("--seeds", options), "-s/--seed");              // one edit
    EXPECT_EQ(llamacl::nearest_option("--t", options), "-t/--temperature");           // dashes
    EXPECT_EQ(llamacl::nearest_option("--ctx-size", options), std::nullopt);
    EXPECT_EQ(llamacl::nearest_option("-x", options), std::nullopt);  // one letter is near every other
}

class CommandLine : public ::testing::Test {
protected:
    void SetUp() override {
        model = write_model(dir, small_config()).string();
        tok = (dir / "tok.bin").string();
    }
    // `command` on the model with its tokenizer, on the CPU, then `flags`; no input.
    CommandResult run(const std::string& command, const std::string& flags) const {
        return run_llama_cl(command + " " + quote(model) + " -z " + quote(tok) + " --backend cpu " + flags + " < /dev/null");
    }
    TempDir dir;
    std::string model, tok;
};

TEST_F(CommandLine, AMisspelledOptionNamesTheNearestOfItsCommand) {
    expect_error(run("generate", "--temp 0.5"), 2,
                 {"generate: unknown option '--temp'; did you mean -t/--temperature? (see llama-cl generate --help)"},
                 "generate --temp");
    expect_error(run("generate", "--top_p=0.5"), 2, {"unknown option '--top_p'; did you mean -p/--top-p?"}, "--top_p");
    // perplexity has no temperature: nothing near, and its own help.
    expect_error(run("perplexity", "-f /dev/null --temp 0.5"), 2,
                 {"perplexity: unknown option '--temp' (see llama-cl perplexity --help)"}, "perplexity --temp");
    expect_error(run_llama_cl("--temp 0.5"), 2, {"unknown option '--temp' (see llama-cl --help)"}, "no command");
    expect_error(run("generate", "-t 0 extra"), 2, {"generate: unexpected argument 'extra'"}, "a stray word");
}

TEST_F(CommandLine, AnOptionsErrorNamesItAsTyped) {
    expect_error(run("generate", "-t abc"), 2, {"-t: must be a number", "(see llama-cl generate --help)"}, "-t");
    expect_error(run("generate", "--temperature abc"), 2, {"--temperature: must be a number"}, "--temperature");
    expect_error(run("generate", "--steps"), 2, {"--steps: needs a value after it"}, "--steps");
}

TEST_F(CommandLine, LongAliasesOfRunCsFlags) {
    const CommandResult short_flags = run("generate", "-t 0.8 -p 0.5 -s 3 -n 20 -i 'a b'");
    ASSERT_EQ(short_flags.exit_code, 0) << short_flags.err;
    const CommandResult long_flags =
        run_llama_cl("generate " + quote(model) + " --tokenizer " + quote(tok) +
                     " --backend cpu --temperature 0.8 --top-p 0.5 --seed 3 --steps 20 --prompt 'a b'");
    EXPECT_EQ(long_flags.exit_code, 0) << long_flags.err;
    EXPECT_EQ(long_flags.out, short_flags.out);
    const CommandResult system = run("chat", "-t 0 -n 0 --system x -i hi");
    ASSERT_EQ(system.exit_code, 0) << system.err;
    EXPECT_EQ(system.out, run("chat", "-t 0 -n 0 -y x -i hi").out);
}

TEST_F(CommandLine, RunCsModeFlagPicksTheCommand) {
    const CommandResult chat = run("chat", "-t 0 -n 30 -y '' -i hi");
    ASSERT_EQ(chat.exit_code, 0) << chat.err;
    const CommandResult generate = run("generate", "-t 0 -n 30 -i hi");
    ASSERT_EQ(generate.exit_code, 0) << generate.err;
    ASSERT_NE(chat.out, generate.out);
    EXPECT_EQ(run("generate", "-m chat -t 0 -n 30 -y '' -i hi").out, chat.out);
    EXPECT_EQ(run("generate", "-t 0 -n 30 -y '' -i hi --mode=chat").out, chat.out);
    EXPECT_EQ(run("chat", "-m generate -t 0 -n 30 -i hi").out, generate.out);
    EXPECT_EQ(run("generate", "-m generate -t 0 -n 30 -i hi").out, generate.out);
    expect_error(run("generate", "-m story"), 2, {"story not in {generate,chat}"}, "-m story");
}

// --prompt-precision exact|fast on every command that runs a model on a device: a bad value names the flag
// and both values; fast asks for a device (the CPU reference has no tensor cores) and is refused with the
// exact work shape, whose bits are run.c's; the cpu shape has no tensor cores, and there it changes nothing.
TEST_F(CommandLine, PromptPrecisionIsExactOrFast) {
    for (const char* command : {"generate", "chat", "perplexity"}) {
        const std::string input = std::string(command) == "perplexity" ? "-f /dev/null " : "-n 4 ";
        expect_error(run(command, input + "--prompt-precision quick"), 2, {"--prompt-precision", "exact", "fast"},
                     command);
        expect_error(run(command, input + "--prompt-precision fast"), 2,
                     {"--prompt-precision fast", "not to --backend cpu"}, command);
    }
    const CommandResult exact = run("generate", "-t 0 -n 30 -i hi");
    ASSERT_EQ(exact.exit_code, 0) << exact.err;
    const CommandResult asked = run("generate", "-t 0 -n 30 -i hi --prompt-precision exact");
    EXPECT_EQ(asked.exit_code, 0) << asked.err;
    EXPECT_EQ(asked.out, exact.out);
    const std::string on_device = "generate " + quote(model) + " -z " + quote(tok) + " --backend opencl -t 0 -n 30 -i hi ";
    expect_error(run_llama_cl(on_device + "--work-shape exact --prompt-precision fast"), 2,
                 {"--prompt-precision fast", "--work-shape exact"}, "the exact work shape");
    // Refused before any device is looked for: a selector that matches none is not what the user hears.
    for (const std::string& run_on : {on_device, std::string("bench --synthetic tiny -n 2 ")})
        expect_error(run_llama_cl(run_on + "--device no-such-device --work-shape exact:16x64 --prompt-precision fast"), 2,
                     {"--prompt-precision fast", "--work-shape exact"}, "exact:16x64 without a device");
    for (const char* shape : {"gpu", "cpu"}) {
        const std::string flags = std::string("--work-shape ") + shape;
        const CommandResult device_exact = run_llama_cl(on_device + flags);
        ASSERT_EQ(device_exact.exit_code, 0) << device_exact.err;
        const CommandResult device_fast = run_llama_cl(on_device + flags + " --prompt-precision fast");
        EXPECT_EQ(device_fast.exit_code, 0) << device_fast.err;
        if (std::string(shape) == "cpu") {
            EXPECT_EQ(device_fast.out, device_exact.out);
        }
    }
}

// llama2.c's `run MODEL [flags]` with `run` replaced by llama-cl.
TEST_F(CommandLine, AFileFirstRunsGenerateAsRunCDoes) {
    const CommandResult generate = run("generate", "-t 0 -n 30 -i hi");
    ASSERT_EQ(generate.exit_code, 0) << generate.err;
    EXPECT_EQ(run("", "-t 0 -n 30 -i hi").out, generate.out);
    EXPECT_EQ(run("", "-m chat -t 0 -n 30 -y '' -i hi").out, run("chat", "-t 0 -n 30 -y '' -i hi").out);
    // run.c's usage example, in a directory holding model.bin and tokenizer.bin.
    std::filesystem::rename(model, dir / "model.bin");
    std::filesystem::rename(tok, dir / "tokenizer.bin");
    const CommandResult example = run_command("cd " + quote(dir.path().string()) + " && " + quote(LLAMACL_BINARY) +
                                              " model.bin -n 256 -i \"Once upon a time\" < /dev/null");
    EXPECT_EQ(example.exit_code, 0) << example.err;
    EXPECT_EQ(example.out.rfind("Once upon a time", 0), 0u) << example.out;
    // A word that is neither a command nor a file is still an unknown command.
    expect_error(run_llama_cl("no-such-model.bin -n 8"), 2, {"unknown command 'no-such-model.bin'"}, "no file");
}

namespace {

// `args` run with stdout not a terminal and $COLUMNS set to `columns`.
CommandResult run_in_columns(const std::string& args, int columns) {
    return run_command("COLUMNS=" + std::to_string(columns) + " " + quote(LLAMACL_BINARY) + " " + args + " < /dev/null");
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    for (std::size_t at = 0, end; at < text.size(); at = end + 1) {
        end = text.find('\n', at);
        if (end == std::string::npos) end = text.size();
        lines.push_back(text.substr(at, end - at));
    }
    return lines;
}

}  // namespace

TEST(Help, EveryCommandsHelpIsWrappedUntaggedAndEndsWithThreeExamples) {
    constexpr int kColumns = 70;
    for (const char* command : {"generate", "chat", "perplexity", "tokenize", "info", "quantize", "devices", "bench",
                                "check", "help"}) {
        SCOPED_TRACE(command);
        const CommandResult r = run_in_columns(std::string(command) + " --help", kColumns);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        for (const char* tag : {"TEXT:", "FLOAT:", "INT:", ":{", "REQUIRED"}) EXPECT_EQ(r.out.find(tag), std::string::npos) << tag;
        const std::vector<std::string> lines = lines_of(r.out);
        const auto examples = std::find(lines.begin(), lines.end(), "Examples:");
        ASSERT_NE(examples, lines.end()) << r.out;
        for (auto line = lines.begin(); line != examples; ++line)
            EXPECT_LE(line->size(), static_cast<std::size_t>(kColumns)) << *line;
        ASSERT_EQ(lines.end() - examples, 4) << r.out;  // the three, then nothing
        for (auto line = examples + 1; line != lines.end(); ++line) EXPECT_EQ(line->rfind("  llama-cl ", 0), 0u) << *line;
    }
}

TEST(Help, GenerateGroupsItsOptions) {
    const std::string help = run_in_columns("generate --help", 100).out;
    std::size_t previous = 0;
    for (const char* group : {"\nModel:\n", "\nPrompt and sampling:\n", "\nWhere it runs:\n", "\nDebugging:\n"}) {
        const std::size_t at = help.find(group);
        ASSERT_NE(at, std::string::npos) << group << help;
        EXPECT_GT(at, previous) << group;
        previous = at;
    }
    EXPECT_LT(help.find("--temperature"), help.find("\nWhere it runs:\n"));
    EXPECT_GT(help.find("--compare-cpu"), help.find("\nDebugging:\n"));
}

TEST(Help, TheHelpCommandPrintsWhatHelpFlagsDo) {
    for (const char* command : {"generate", "quantize"}) {
        const CommandResult help = run_in_columns(std::string("help ") + command, 80);
        EXPECT_EQ(help.exit_code, 0) << help.err;
        EXPECT_EQ(help.out, run_in_columns(std::string(command) + " --help", 80).out) << command;
    }
    const CommandResult all = run_in_columns("help", 80);
    EXPECT_EQ(all.exit_code, 0) << all.err;
    EXPECT_EQ(all.out, run_in_columns("--help", 80).out);
    expect_error(run_in_columns("help generat", 80), 2, {"help: unknown command 'generat'", "generate"}, "help generat");
}

TEST(Help, NoArgumentsIsAShortUsageNamingEveryCommand) {
    const CommandResult r = run_in_columns("", 80);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_EQ(r.out, "");
    EXPECT_LE(lines_of(r.err).size(), 5u) << r.err;
    for (const char* command : {"generate", "chat", "perplexity", "tokenize", "info", "quantize", "devices", "bench",
                                "check", "help"})
        EXPECT_NE(r.err.find(command), std::string::npos) << command;
}
