// End to end through the binary: run.c's reference outputs, byte for byte, and the generation contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "llamacl/device.hpp"
#include "llamacl/generate.hpp"
#include "llamacl/number_text.hpp"
#include "llamacl/reference.hpp"
#include "models.hpp"
#include "reference_cases.hpp"

using namespace llamacl::test;

TEST(GenerateCpu, EveryReferenceCaseIsByteIdentical) {
    LLAMACL_REQUIRE_SHARED(shared);
    // run.c's cases, and runq.c's on the version-2 (Q8_0) files.
    for (const char* file : {"cases.tsv", "cases-q80.tsv"}) {
        const auto cases = load_cases(shared, file);
        ASSERT_FALSE(cases.empty()) << file;
        for (const ReferenceCase& c : cases) {
            const CommandResult r = run_llama_cl(generate_args(shared, c, "--backend cpu"));
            EXPECT_EQ(r.exit_code, 0) << c.id << ": " << r.err;
            EXPECT_EQ(r.out, read_file(shared / "reference" / c.expected)) << "case " << c.id;
        }
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

// achieved tok/s times the positions decoded after the prompt: a prompt that fills -n has none to time
// (its rate is -v's), one more position has.
TEST(GenerateCpu, TheDecodeRateNeedsAPositionAfterThePrompt) {
    LLAMACL_REQUIRE_SHARED(shared);
    const std::string base = "generate " + quote((shared / "models/stories260K.bin").string()) + " -z " +
                             quote((shared / "models/tok512.bin").string()) + " --backend cpu -i 'a b'";
    ASSERT_EQ(run_llama_cl("tokenize " + quote((shared / "models/tok512.bin").string()) + " 'a b'").out, "1 261 268\n");
    const CommandResult filled = run_llama_cl(base + " -n 3");
    ASSERT_EQ(filled.exit_code, 0) << filled.err;
    EXPECT_EQ(filled.err, "");
    const CommandResult decoded = run_llama_cl(base + " -n 4");
    ASSERT_EQ(decoded.exit_code, 0) << decoded.err;
    EXPECT_EQ(decoded.err.rfind("achieved tok/s: ", 0), 0u) << decoded.err;
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
        "cpu reference activation bytes: " + std::to_string(size.reference_activation_bytes),
        "cpu reference prompt batch bytes: " + std::to_string(llamacl::ReferenceForward::batch_bytes(c, false)),
        "with every position's logits (perplexity, --compare-cpu) " +
            std::to_string(llamacl::ReferenceForward::batch_bytes(c, true)),
        // every matrix a position reads once, as floats: wq and wo, wk and wv, w1, w2 and w3, the classifier
        "cpu reference laid-out f32 matrices: " +
            std::to_string(4ull * (c.n_layers * (2ull * c.dim * c.dim + 2ull * c.kv_dim() * c.dim +
                                                 3ull * c.hidden_dim * c.dim) +
                                   1ull * c.vocab_size * c.dim)) +
            " ", "for runs of 64 positions or more"};
    for (const std::string& expect : expected)
        EXPECT_NE(r.out.find(expect), std::string::npos) << expect << "\n" << r.out;
}

// The status lines of a first run (progress.hpp) and --backend auto's choice (src/cli.cpp).
namespace {

bool has_script() { return run_command("command -v script >/dev/null").exit_code == 0; }

// Runs llama-cl under a pseudo-terminal (util-linux's script) with stdout sent to `stdout_file`: what
// comes back is what the terminal showed, stderr alone.
CommandResult on_terminal(const std::string& args, const std::filesystem::path& stdout_file) {
    return run_command("script -qec " + quote(quote(LLAMACL_BINARY) + " " + args + " > " + quote(stdout_file.string())) +
                       " /dev/null");
}

bool any_gpu() {
    for (const llamacl::DeviceInfo& d : llamacl::list_devices())
        if (d.type == "GPU") return true;
    return false;
}

}  // namespace

TEST(FirstRun, ProgressLinesAppearOnATerminalOnlyAndAreCleared) {
    if (!has_script()) GTEST_SKIP() << "util-linux's script is not installed: no pseudo-terminal to test with";
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    // (Q8_0: weights that every device uploads, where a CPU device reads float weights in place.)
    const std::string args = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -n 6 -t 0 --backend opencl --weights q8_0";
    const CommandResult tty = on_terminal(args, dir / "out.txt");
    ASSERT_EQ(tty.exit_code, 0) << tty.out;
    for (const char* line : {"\r\033[Kllama-cl: compiling kernels for ", "(the driver caches them for the next run)",
                             "\r\033[Kllama-cl: uploading ", "\r\033[Kllama-cl: preparing the kernels' first launch"})
        EXPECT_NE(tty.out.find(line), std::string::npos) << line << "\n" << tty.out;
    // Cleared before the run's own output: the last status line is erased, and nothing follows on it.
    EXPECT_NE(tty.out.find("\r\033[Kachieved tok/s"), std::string::npos) << tty.out;
    const std::string out = read_file(dir / "out.txt");
    EXPECT_EQ(out.find('\033'), std::string::npos) << "nothing on stdout: " << out;
    EXPECT_EQ(out.find("llama-cl"), std::string::npos) << out;

    // In a pipe: no status lines at all, and the same stdout.
    const CommandResult piped = run_llama_cl(args);
    ASSERT_EQ(piped.exit_code, 0) << piped.err;
    EXPECT_EQ(piped.err.find('\033'), std::string::npos) << piped.err;
    EXPECT_EQ(piped.err.find("compiling"), std::string::npos) << piped.err;
    EXPECT_EQ(piped.out, out);

    // -q: none on a terminal either.
    const CommandResult quiet = on_terminal(args + " -q", dir / "quiet.txt");
    ASSERT_EQ(quiet.exit_code, 0) << quiet.out;
    EXPECT_EQ(quiet.out.find("\033[K"), std::string::npos) << quiet.out;
}

TEST(FirstRun, PerplexityClearsItsProgressAndQuietSilencesItsSummary) {
    TempDir dir;
    const auto model = write_model(dir, small_config());  // seq_len 40: the text takes several windows
    std::ofstream(dir / "text.txt") << "the quick brown fox jumps over the lazy dog, and then it runs home again to sleep";
    const std::string args = "perplexity " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -f " + quote((dir / "text.txt").string()) + " --backend cpu --context 8";
    const CommandResult piped = run_llama_cl(args);
    ASSERT_EQ(piped.exit_code, 0) << piped.err;
    EXPECT_EQ(piped.err.rfind("perplexity: ", 0), 0u) << piped.err;
    EXPECT_NE(piped.err.find(" windows, "), std::string::npos) << piped.err;
    const CommandResult quiet = run_llama_cl(args + " -q");
    ASSERT_EQ(quiet.exit_code, 0) << quiet.err;
    EXPECT_EQ(quiet.err, "");
    EXPECT_EQ(quiet.out, piped.out);
    if (!has_script()) GTEST_SKIP() << "util-linux's script is not installed: no pseudo-terminal to test with";
    const CommandResult tty = on_terminal(args, dir / "out.txt");
    ASSERT_EQ(tty.exit_code, 0) << tty.out;
    EXPECT_NE(tty.out.find("\r\033[Kllama-cl: perplexity: "), std::string::npos) << tty.out;
    // The last progress line is erased and the summary written over it, nothing left of it on its line.
    EXPECT_NE(tty.out.find("\r\033[Kperplexity: "), std::string::npos) << tty.out;
    EXPECT_EQ(on_terminal(args + " -q", dir / "quiet.txt").out, "");
}

TEST(FirstRun, AnEmptyKernelCacheAddsNothingToStderr) {
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    // (Under the sanitizer suite, PoCL and LLVM leak while they compile, found at exit: not this program's
    // memory, and suppressed here alone, where every program is compiled.)
    const std::filesystem::path suppressions = dir / "lsan.supp";
    std::ofstream(suppressions) << "leak:libLLVM\nleak:libpocl\n";
    for (const char* weights : {"f32", "q8_0"}) {
        // A cache of its own (PoCL's; other drivers ignore it), so that every program is compiled anew.
        const std::filesystem::path cache = dir / (std::string("cache-") + weights);
        std::filesystem::create_directory(cache);
        const std::string env = "LSAN_OPTIONS=print_suppressions=0:suppressions=" + quote(suppressions.string()) +
                                " POCL_CACHE_DIR=" + quote(cache.string());
        const CommandResult r = run_command(env + " " + quote(LLAMACL_BINARY) + " generate " + quote(model.string()) +
                                            " -z " + quote((dir / "tok.bin").string()) +
                                            " -n 4 -t 0 --backend opencl --weights " + weights);
        ASSERT_EQ(r.exit_code, 0) << weights << ": " << r.err;
        EXPECT_EQ(r.err.rfind("achieved tok/s: ", 0), 0u) << weights << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << weights << ": " << r.err;
    }
}

TEST(FirstRun, BenchSaysWhatItIsDoingOnATerminal) {
    if (!has_script()) GTEST_SKIP() << "util-linux's script is not installed: no pseudo-terminal to test with";
    TempDir dir;
    const CommandResult tty = on_terminal("bench --synthetic tiny -n 2 --runs 2 --prompt 4", dir / "out.txt");
    ASSERT_EQ(tty.exit_code, 0) << tty.out;
    for (const char* step : {"bench: writing the synthetic tiny model", "bench: measuring the copy bandwidth (",
                             "bench: measuring the FMA throughput", "bench: loading the model onto ",
                             "bench: a first prefill of the prompt (4 positions)", "bench: timed prefill 2 of 2",
                             "bench: running the context (", "bench: timed run 1 of 2", "bench: timed run 2 of 2"})
        EXPECT_NE(tty.out.find(step), std::string::npos) << step << "\n" << tty.out;
    EXPECT_EQ(read_file(dir / "out.txt").find("bench: "), std::string::npos);
    const CommandResult quiet = on_terminal("bench --synthetic tiny -n 2 --runs 1 -q", dir / "quiet.txt");
    ASSERT_EQ(quiet.exit_code, 0) << quiet.out;
    EXPECT_EQ(quiet.out.find("bench: "), std::string::npos) << quiet.out;
    const CommandResult piped = run_llama_cl("bench --synthetic tiny -n 2 --runs 1");
    ASSERT_EQ(piped.exit_code, 0) << piped.err;
    EXPECT_EQ(piped.err, "");
}

TEST(FirstRun, VerboseSaysWhereTheStartupWentOnStderr) {
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    const std::string args = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -n 6 -t 0 --backend opencl";
    const CommandResult verbose = run_llama_cl(args + " -v"), plain = run_llama_cl(args);
    ASSERT_EQ(verbose.exit_code, 0) << verbose.err;
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const std::size_t at = verbose.err.find("\nstartup: ");
    ASSERT_NE(at, std::string::npos) << verbose.err;
    const std::string line = verbose.err.substr(at + 1, verbose.err.find('\n', at + 1) - at - 1);
    for (const char* part : {" s: checkpoint and tokenizer ", " s, OpenCL platforms and device ", " s, kernel builds ",
                             " program", "), buffers and weights ", " s, first launches "})
        EXPECT_NE(line.find(part), std::string::npos) << part << "\n" << line;
    EXPECT_EQ(plain.err.find("startup:"), std::string::npos) << plain.err;
    EXPECT_EQ(verbose.out, plain.out);  // stdout is the text alone
    EXPECT_EQ(verbose.out.find("startup"), std::string::npos);
    EXPECT_EQ(verbose.out.find("tok/s"), std::string::npos);
}

TEST(BackendAuto, ARunShorterThanAnOpenclStartRunsOnTheReferenceWithoutOne) {
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    const std::string args = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) + " -t 0";
    // 4 positions of 0.29 MiB, on every machine: a GPU's driver takes longer to start than the reference.
    const CommandResult r = run_llama_cl(args + " -n 4 -v");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.rfind("llama-cl: --backend auto: the CPU reference, without starting OpenCL: this run reads 1.17 "
                          "MiB of weights, less than an OpenCL start costs (--backend opencl to use a device)\n",
                          0),
              0u)
        << r.err;
    EXPECT_NE(r.err.find("\nbackend: CPU reference\n"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("startup:"), std::string::npos) << r.err;  // (-v's line of an OpenCL start)
    EXPECT_EQ(r.out, run_llama_cl(args + " -n 4 --backend cpu").out);
    EXPECT_EQ(run_llama_cl(args + " -n 4 -q").err.find("--backend auto"), std::string::npos);
    // Flags that ask for a device, and runs past the bound, start OpenCL.
    for (const char* flags : {" -n 4 --backend opencl", " -n 4 --compare-cpu", " -n 4 --work-shape gpu"}) {
        const CommandResult device = run_llama_cl(args + flags);
        EXPECT_EQ(device.exit_code, 0) << flags << ": " << device.err;
        EXPECT_EQ(device.err.find("without starting OpenCL"), std::string::npos) << flags << ": " << device.err;
    }
    const auto long_model = write_model(dir, long_context_config(), 1, 7, "long.bin");
    const CommandResult long_run = run_llama_cl("generate " + quote(long_model.string()) + " -z " +
                                                quote((dir / "tok.bin").string()) + " -t 0 -n 200");
    EXPECT_EQ(long_run.exit_code, 0) << long_run.err;
    EXPECT_EQ(long_run.err.find("without starting OpenCL"), std::string::npos) << long_run.err;
}

// --backend auto's rates (backend_choice.hpp) in a cache of the test's own: $XDG_CACHE_HOME moved, and
// PoCL's kernel cache kept where it was, so that its builds stay warm.
struct RatesCache {
    explicit RatesCache(const TempDir& dir) : home(dir / "cache"), file(home / "llama-cl" / "backend-rates.json") {}

    CommandResult run(const std::string& args) const {
        const char* pocl = std::getenv("POCL_CACHE_DIR");
        const char* xdg = std::getenv("XDG_CACHE_HOME");
        const char* user = std::getenv("HOME");
        const std::string kernels = pocl && *pocl ? pocl
                                    : xdg && *xdg ? std::string(xdg) + "/pocl"
                                                  : std::string(user ? user : "/tmp") + "/.cache/pocl";
        return run_command("POCL_CACHE_DIR=" + quote(kernels) + " XDG_CACHE_HOME=" + quote(home.string()) + " " +
                           quote(LLAMACL_BINARY) + " " + args);
    }
    nlohmann::json read() const { return nlohmann::json::parse(read_file(file)); }
    // Every entry's rates set to these.
    void set_rates(double reference, double device) const {
        nlohmann::json j = read();
        for (auto& [key, rates] : j["rates"].items()) rates = {{"reference", reference}, {"device", device}};
        std::ofstream(file) << j.dump();
    }

    std::filesystem::path home, file;
};

TEST(BackendAuto, OnCpuOnlyMachinesThePathMeasuredFasterRunsAndItsRatesAreKept) {
    TempDir dir;
    // Its whole context (-n 0) is a run past the bound on runs too short for OpenCL's start.
    const auto model = write_model(dir, long_context_config(), 1, 7, "long.bin");
    const std::string args = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) + " -n 0 -t 0";
    const RatesCache cache(dir);
    const CommandResult first = cache.run(args + " -v");
    ASSERT_EQ(first.exit_code, 0) << first.err;
    if (any_gpu()) {  // a GPU is the choice without a question: nothing measured
        EXPECT_EQ(first.err.find("--backend auto"), std::string::npos) << first.err;
        EXPECT_FALSE(std::filesystem::exists(cache.file));
        return;
    }
    // Measured once, both paths' rates kept under a key that names the device, the shape and the work.
    EXPECT_NE(first.err.find("llama-cl: --backend auto: "), std::string::npos) << first.err;
    EXPECT_NE(first.err.find("(measured now, kept in " + cache.file.string() + "; --backend "), std::string::npos)
        << first.err;
    const nlohmann::json kept = cache.read();
    ASSERT_EQ(kept["rates"].size(), 1u) << kept.dump();
    const std::string key = kept["rates"].begin().key();
    const nlohmann::json rates = kept["rates"].begin().value();
    EXPECT_NE(key.find("dim 96 hidden 256 layers 8"), std::string::npos) << key;
    EXPECT_NE(key.find("| decode |"), std::string::npos) << key;
    EXPECT_GT(rates["reference"].get<double>(), 0);
    EXPECT_GT(rates["device"].get<double>(), 0);
    const CommandResult again = cache.run(args + " -v");
    EXPECT_NE(again.err.find("(measured earlier, kept in " + cache.file.string()), std::string::npos) << again.err;
    EXPECT_EQ(again.out, first.out);  // greedy text: the paths agree on this model
    // The line is -v's alone.
    EXPECT_EQ(cache.run(args).err.find("--backend auto"), std::string::npos);

    // The rates decide: the reference where it ran faster...
    cache.set_rates(2000, 1000);
    const CommandResult reference = cache.run(args + " -v");
    EXPECT_NE(reference.err.find("llama-cl: --backend auto: the CPU reference, 2000 tok/s against 1000 tok/s on "),
              std::string::npos)
        << reference.err;
    EXPECT_NE(reference.err.find("\nbackend: CPU reference\n"), std::string::npos) << reference.err;
    EXPECT_EQ(reference.out, run_llama_cl(args + " --backend cpu").out);
    // ... the device where it did.
    cache.set_rates(1000, 2000);
    const CommandResult device = cache.run(args + " -v");
    EXPECT_NE(device.err.find(", 2000 tok/s against the CPU reference's 1000 tok/s on this model (measured earlier"),
              std::string::npos)
        << device.err;
    EXPECT_NE(device.err.find("\ndevice: "), std::string::npos) << device.err;
    // perplexity's windows are work of their own, measured apart (a text of a few hundred tokens).
    std::ofstream text(dir / "text.txt");
    for (int i = 0; i < 8; ++i) text << "the quick brown fox jumps over the lazy dog and runs home to sleep. ";
    text.close();
    const CommandResult scored = cache.run("perplexity " + quote(model.string()) + " -z " +
                                           quote((dir / "tok.bin").string()) + " -f " + quote((dir / "text.txt").string()) +
                                           " -v");
    EXPECT_EQ(scored.exit_code, 0) << scored.err;
    EXPECT_NE(scored.err.find(" positions/s"), std::string::npos) << scored.err;
    EXPECT_NE(scored.err.find("(measured now, kept in "), std::string::npos) << scored.err;
    EXPECT_EQ(cache.read()["rates"].size(), 2u);

    // A malformed cache holds nothing: measured again, and rewritten.
    std::ofstream(cache.file) << "{\"build\": ";
    const CommandResult malformed = cache.run(args + " -v");
    EXPECT_EQ(malformed.exit_code, 0) << malformed.err;
    EXPECT_NE(malformed.err.find("(measured now, kept in "), std::string::npos) << malformed.err;
    EXPECT_EQ(cache.read()["rates"].size(), 1u);
    // A cache that cannot be written loses the rates alone.
    std::filesystem::remove_all(cache.home);
    std::ofstream(cache.home) << "a file where the cache's directory would be";
    const CommandResult unkept = cache.run(args + " -v");
    EXPECT_EQ(unkept.exit_code, 0) << unkept.err;
    EXPECT_NE(unkept.err.find("measured now; not kept: " + cache.file.string() + " could not be written"),
              std::string::npos)
        << unkept.err;
}

TEST(BackendAuto, ADeviceWhoseKernelsCannotReadTheWeightsLeavesThemToTheReference) {
    TempDir dir;
    // Q8_0 in groups of 2 (no multiple of 4 divides dim 300 and hidden_dim 802), a run past the short bound.
    const auto odd = write_model(dir, llamacl::Config{300, 802, 2, 6, 2, 300, 2000, true}, 1, 7, "odd.bin");
    const std::string args = "generate " + quote(odd.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -n 1000 -t 0 --weights q8_0";
    if (any_gpu()) GTEST_SKIP() << "a GPU is auto's choice, and its refusal of these groups an error";
    const RatesCache cache(dir);
    const CommandResult r = cache.run(args + " -v");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("llama-cl: --backend auto: the CPU reference, as "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'s kernels cannot run this model ("), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(cache.file));  // nothing measured
    EXPECT_EQ(r.out, run_llama_cl(args + " --backend cpu").out);
}

TEST(BuildOptions, LlamaclBuildOptionsReachEveryBuildAndAreNamedWhenTheyFail) {
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    const std::string args = " generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -t 0 -n 4 --backend opencl";
    const CommandResult plain = run_command(quote(LLAMACL_BINARY) + args);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    // A tunable of a kernel this shape does not run changes nothing.
    const CommandResult tuned = run_command("LLAMACL_BUILD_OPTIONS=-DGEMM_TK=16 " + quote(LLAMACL_BINARY) + args);
    EXPECT_EQ(tuned.exit_code, 0) << tuned.err;
    EXPECT_EQ(tuned.out, plain.out);
    // An option the compiler refuses fails the build, the message naming it and the variable.
    const CommandResult refused = run_command("LLAMACL_BUILD_OPTIONS=-no-such-option-xyz " + quote(LLAMACL_BINARY) + args);
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_EQ(refused.out, "");
    EXPECT_NE(refused.err.find("llama-cl: kernel build failed on "), std::string::npos) << refused.err;
    EXPECT_NE(refused.err.find("-no-such-option-xyz\", LLAMACL_BUILD_OPTIONS among them)"), std::string::npos)
        << refused.err;
}

TEST(BuildOptions, MacrosThatAreNotTunablesAreRefusedBeforeAnyBuild) {
    TempDir dir;
    const auto model = write_model(dir, small_config(), 1);
    const std::string args = " generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -n 4 --backend opencl";
    // The host's own macros (the work-group size, the GEMM's rows, any other name), defined or undefined.
    for (const std::string options : {"-DLOCAL=2", "-DGEMM_ROWS=0", "'-D GEMM_ROWS=1'", "-UGEMM_ROWS", "-DUNKNOWN"}) {
        const CommandResult r = run_command("LLAMACL_BUILD_OPTIONS=" + options + " " + quote(LLAMACL_BINARY) + args);
        SCOPED_TRACE(options);
        EXPECT_EQ(r.exit_code, 2) << r.err;
        EXPECT_EQ(r.out, "");
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_EQ(r.err.rfind("llama-cl: LLAMACL_BUILD_OPTIONS: ", 0), 0u) << r.err;
        EXPECT_NE(r.err.find("is not a kernel tunable"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("GEMM_TK (16 or 32"), std::string::npos) << r.err;
    }
}

TEST(VerboseStats, CountsAreSingularForOne) {
    EXPECT_EQ(llamacl::counted(1, "token"), "1 token");
    EXPECT_EQ(llamacl::counted(0, "run"), "0 runs");
    EXPECT_EQ(llamacl::counted(2, "window"), "2 windows");
    llamacl::GenerateStats stats;
    stats.prompt_tokens = 1;
    stats.positions = 2;
    const std::string rates = stats.describe_rates();
    EXPECT_EQ(rates.rfind("prompt: 1 token, ", 0), 0u) << rates;
    EXPECT_NE(rates.find("; generation: 1 token, "), std::string::npos) << rates;
}

namespace {

// -v's "prompt: N tokens, ...; generation: M tokens, ..." as {N, M}; {-1, -1} where stderr lacks it.
std::pair<int, int> verbose_counts(const std::string& err) {
    const std::size_t at = err.find("prompt: ");
    std::pair<int, int> counts{-1, -1};
    if (at == std::string::npos) return counts;
    const std::size_t generation = err.find("generation: ", at);
    counts.first = std::atoi(err.c_str() + at + 8);
    if (generation != std::string::npos) counts.second = std::atoi(err.c_str() + generation + 12);
    return counts;
}

}  // namespace

// The prompt's tokens and the positions after it, whichever backend ran them (a device decodes greedily
// from the prompt's last token on, the reference samples after the whole prompt).
TEST(VerboseStats, PromptAndGenerationCountsAreTheSameOnEveryBackend) {
    TempDir dir;
    const auto model = write_model(dir, small_config());
    const std::string tok = quote((dir / "tok.bin").string());
    const std::string ids = run_llama_cl("tokenize " + tok + " 'a b c'").out;
    const int prompt = static_cast<int>(std::count(ids.begin(), ids.end(), ' ')) + 1;
    const std::string base = "generate " + quote(model.string()) + " -z " + tok + " -t 0 -n 20 -i 'a b c' -v --backend ";
    const CommandResult cpu = run_llama_cl(base + "cpu"), device = run_llama_cl(base + "opencl");
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(device.exit_code, 0) << device.err;
    ASSERT_EQ(device.out, cpu.out);
    EXPECT_EQ(verbose_counts(cpu.err).first, prompt) << cpu.err;
    EXPECT_EQ(verbose_counts(device.err), verbose_counts(cpu.err)) << device.err;
}

TEST(VerboseStats, ASeedFromTheClockIsPrintedAndDrawsTheSampleAgain) {
    TempDir dir;
    const auto model = write_model(dir, small_config());
    const std::string base = "generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                             " -t 1 -n 30 --backend cpu";
    const CommandResult clock = run_llama_cl(base + " -s 0 -v");
    ASSERT_EQ(clock.exit_code, 0) << clock.err;
    const std::size_t at = clock.err.find("seed: ");
    ASSERT_NE(at, std::string::npos) << clock.err;
    const long long seed = std::atoll(clock.err.c_str() + at + 6);
    ASSERT_GT(seed, 0) << clock.err;
    EXPECT_NE(clock.err.find("-s " + std::to_string(seed) + " draws this sample again"), std::string::npos) << clock.err;
    EXPECT_EQ(run_llama_cl(base + " -s " + std::to_string(seed)).out, clock.out);
    EXPECT_EQ(run_llama_cl(base + " -s 0").err.find("seed: "), std::string::npos) << "only with -v";
    EXPECT_EQ(run_llama_cl(base + " -s 0 -v -t 0").err.find("seed: "), std::string::npos) << "greedy draws nothing";
}

// --compare-cpu runs the device one step at a time, whatever schedule it would choose alone.
TEST(VerboseStats, CompareCpuNamesTheScheduleThatRuns) {
    LLAMACL_REQUIRE_SHARED(shared);
    const std::string base = "generate " + quote((shared / "models/stories260K.bin").string()) + " -z " +
                             quote((shared / "models/tok512.bin").string()) +
                             " -t 0 -n 4 -v --backend opencl --schedule token";
    const CommandResult alone = run_llama_cl(base);
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    EXPECT_NE(alone.err.find("schedule: token"), std::string::npos) << alone.err;
    const CommandResult compared = run_llama_cl(base + " --compare-cpu");
    ASSERT_EQ(compared.exit_code, 0) << compared.err;
    EXPECT_NE(compared.err.find("schedule: per-op (one kernel launch per step: --compare-cpu"), std::string::npos)
        << compared.err;
}
