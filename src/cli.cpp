#include "llamacl/cli.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include "llamacl/backend.hpp"
#include "llamacl/bench_command.hpp"
#include "llamacl/chat.hpp"
#include "llamacl/check_command.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/compare.hpp"
#include "llamacl/device.hpp"
#include "llamacl/device_forward.hpp"
#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/generate.hpp"
#include "llamacl/ggml_types.hpp"
#include "llamacl/gguf_file.hpp"
#include "llamacl/help_format.hpp"
#include "llamacl/number_text.hpp"
#include "llamacl/option_suggestion.hpp"
#include "llamacl/perplexity.hpp"
#include "llamacl/progress.hpp"
#include "llamacl/quantize.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/run_c_command_line.hpp"
#include "llamacl/runtime_args.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/tokenizer.hpp"

namespace llamacl {

namespace {

struct GenerateArgs {
    std::string checkpoint;
    std::string tokenizer = "tokenizer.bin";
    bool tokenizer_given = false;  // -z on the command line, not the default
    bool allow_vocab_mismatch = false;
    double temperature = 1.0;  // run.c parses with atof and stores a float; so do we
    double topp = 0.9;
    int seed = 0;              // 0: seed from the clock
    int steps = 256;
    std::string prompt;
    std::string weights;  // empty: the file's own format
    BackendFlags backend;
};

// The checkpoint and -z, which every command that runs the model takes first.
void add_model_options(CLI::App* cmd, GenerateArgs& a) {
    cmd->add_option("checkpoint", a.checkpoint, "model: a llama2.c checkpoint (.bin, version 0, 1 or 2) or a GGUF file")
        ->required()
        ->check(not_empty("a checkpoint file"));
    const OptionGroup group(*cmd, kModelGroup);
    cmd->add_option("-z,--tokenizer", a.tokenizer, "tokenizer file (llama2.c tokenizer.bin format)")
        ->check(not_empty("a tokenizer file"))
        ->capture_default_str();
    add_vocab_mismatch_flag(*cmd, a.allow_vocab_mismatch);
}

// The tokenizer the flags name for the model `ck`.
Tokenizer model_tokenizer(const GenerateArgs& a, const Checkpoint& ck) {
    return Tokenizer::for_model(a.checkpoint, a.tokenizer, a.tokenizer_given, ck.config().vocab_size,
                                a.allow_vocab_mismatch ? VocabFit::at_least : VocabFit::exact);
}

// The help's group of the prompt and of how tokens are drawn.
constexpr const char* kSamplingGroup = "Prompt and sampling";

// run.c's sampling flags.
void add_sampling_options(CLI::App* cmd, GenerateArgs& a) {
    const OptionGroup group(*cmd, kSamplingGroup);
    cmd->add_option("-t,--temperature", a.temperature, "temperature in [0, inf); 0 is greedy")
        ->transform(number([](const std::string& text) { return "must be a number, e.g. -t 0.8 (got '" + text + "')"; }))
        ->capture_default_str();
    cmd->add_option("-p,--top-p", a.topp, "top-p (nucleus) in [0, 1]; 0 or 1 samples from the whole distribution")
        // llama.cpp's -p is the prompt: a text here is most likely one.
        ->transform(number([](const std::string& text) {
            return "top-p must be a number in [0, 1] (got '" + text + "'); the prompt is -i, as in run.c: -i '" + text +
                   "'";
        }))
        ->capture_default_str();
    cmd->add_option("-s,--seed", a.seed, "random seed; 0 seeds from the clock")
        // Decimal and an int, as run.c's atoi reads it: atoi keeps a larger number's low 32 bits (4294967301
        // seeds as 5), which a seed accepted here would not reproduce.
        ->transform(decimal_integer(std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                                    "an integer from -2147483648 to 2147483647 (run.c reads it as an int)", "INTEGER"))
        ->capture_default_str();
    cmd->add_option("-n,--steps", a.steps, "positions to run, prompt included; 0 means the whole context (seq_len)")
        ->transform(decimal_int())
        ->capture_default_str();
    cmd->add_option("-i,--prompt", a.prompt, "input prompt");
}

// run.c's -m: the command runs as the mode names it (run_c_command_line.hpp routes it before parsing).
void add_mode_option(CLI::App* cmd) {
    const OptionGroup group(*cmd, kSamplingGroup);
    cmd->add_option("-m,--mode", "run.c's mode: generate or chat (generate -m chat is chat)")
        ->check(CLI::IsMember({"generate", "chat"}));
}

// Where the forward pass runs, and what it reports.
void add_backend_options(CLI::App* cmd, GenerateArgs& a) {
    cmd->add_option("--backend", a.backend.choice,
                    "where the forward pass runs: opencl, cpu (the reference), or auto (a run that reads under "
                    "512 MiB of weights in all on the CPU reference, without starting OpenCL; else OpenCL when a "
                    "device exists, else cpu; where the only devices are CPUs, the path that ran this model "
                    "faster, measured on its first run and kept in ~/.cache/llama-cl; -v says which)")
        ->check(CLI::IsMember({"auto", "opencl", "cpu"}))
        ->capture_default_str()
        ->group(kWhereItRuns);
    add_weights_option(*cmd, a.weights);
    add_runtime_options(*cmd, a.backend.runtime);
    const OptionGroup debugging(*cmd, "Debugging");
    cmd->add_flag("--compare-cpu", a.backend.compare_cpu,
                  "run the CPU reference in lockstep and compare every device boundary with it; the last stderr "
                  "line names the first divergence (token, layer, operation), exit status 3 if there is one. "
                  "Self-test: LLAMACL_INJECT_FAULT=layer:L,op:OP (or op:final_norm / op:logits) corrupts that "
                  "device result on purpose");
    cmd->add_option("--tolerance", a.backend.tolerance,
                    "--compare-cpu: a boundary diverges when its max abs error exceeds this times max(1, the "
                    "reference tensor's largest magnitude); 0 demands equal bits (--work-shape exact). Default: "
                    "0.001; with quantized weights 0.05 for int8 values and 0.1 for 4-bit ones, where a last-bit "
                    "difference can round an activation to the next integer of its group")
        ->transform(number([](const std::string& text) {
            return "must be a number, e.g. --tolerance 0.001 (got '" + text + "')";
        }));
    cmd->add_flag("-q,--quiet", a.backend.quiet,
                  "no status lines on stderr: neither the fallback to the CPU reference where there is no OpenCL "
                  "device nor progress while kernels compile and weights upload (shown only on a terminal)");
    cmd->add_flag("-v,--verbose", a.backend.verbose,
                  "print the device, capacity plan and per-token counters on stderr (with --compare-cpu: the "
                  "boundary tables of the first token and of the first diverging token)");
}

void add_generate(CLI::App& app, GenerateArgs& a) {
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (run.c-compatible flags and output)");
    add_model_options(cmd, a);
    add_sampling_options(cmd, a);
    add_mode_option(cmd);
    add_backend_options(cmd, a);
    set_examples(*cmd, {"llama-cl generate stories15M.bin -z tokenizer.bin -t 0 -i \"Once upon a time\"",
                        "llama-cl generate stories260K.bin -z tok512.bin --temperature 0.8 --seed 42",
                        "llama-cl generate model.gguf --backend cpu -v"});
}

void check_generate_args(const GenerateArgs& a) {
    // (Finite as the float it is stored in, as run.c stores it.)
    if (!(a.temperature >= 0.0 && std::isfinite(static_cast<float>(a.temperature))))
        throw usage_error("-t: temperature must be a finite number >= 0, at most a float's 3.40282e+38 (got " +
                          number_text("%.9g", a.temperature) + ")");
    if (!(a.topp >= 0.0 && a.topp <= 1.0))
        throw usage_error("-p: top-p must be in [0, 1] (got " + number_text("%.9g", a.topp) + ")");
    if (a.steps < 0) throw usage_error("-n: steps must be >= 0 (got " + std::to_string(a.steps) + ")");
    check_backend_flags(a.backend);
}

// run.c: an unsigned seed; 0 means "from the clock"; negative values wrap as atoi's int would.
// -s 0 seeds from the clock, and -v says with what where tokens are drawn (-t above 0), so that a good sample
// can be drawn again.
Sampler make_sampler(const GenerateArgs& a, int vocab_size) {
    std::uint64_t seed = static_cast<std::uint64_t>(a.seed);
    if (seed == 0) {
        seed = static_cast<unsigned int>(std::time(nullptr));
        if (a.backend.verbose && a.temperature > 0)
            std::fprintf(stderr, "seed: %llu, from the clock (-s %llu draws this sample again)\n",
                         static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
    }
    return Sampler(vocab_size, static_cast<float>(a.temperature), static_cast<float>(a.topp), seed);
}

// The checkpoint the flags name, in --weights' format; progress lines heed -q from here on, the
// conversion's first.
Checkpoint open_model(const GenerateArgs& a) {
    set_progress_quiet(a.backend.quiet);
    Checkpoint ck = Checkpoint::open(a.checkpoint);
    if (!ck.load_note().empty() && !a.backend.quiet) std::fprintf(stderr, "llama-cl: %s: %s\n", a.checkpoint.c_str(), ck.load_note().c_str());
    return with_weights(std::move(ck), weights_format(a.weights));
}

int run_generate(const GenerateArgs& a) {
    const Checkpoint ck = open_model(a);
    const Config& c = ck.config();
    const std::optional<Fault> fault = fault_from_environment(c, "generate");  // a malformed one is an error on every backend
    const Tokenizer tokenizer = model_tokenizer(a, ck);
    const int steps = effective_steps(a.steps, c.seq_len);
    const std::vector<int> prompt = encode_prompt(tokenizer, a.prompt, steps, c.seq_len, c.vocab_size);
    Sampler sampler = make_sampler(a, c.vocab_size);
    // generate decodes greedily on the device at temperature 0, after prefilling the prompt but its last
    // token; a sampled run prefills the whole prompt.
    const bool greedy = sampler.temperature() == 0.0f;
    const bool prefills = prompt.size() > (greedy ? 2u : 1u);
    Backend backend(a.backend, ck, fault, BackendRun{steps, steps, Work::decode, prefills, greedy});
    GenerateStats stats;
    try {
        stats = generate(backend.driver(), tokenizer, sampler, prompt, steps, stdout);
    } catch (const NonFiniteLogits& e) {
        return backend.ended_non_finite(e);
    }
    if (stats.tokens_per_s > 0) std::fprintf(stderr, "achieved tok/s: %f\n", stats.tokens_per_s);
    if (a.backend.verbose) std::fprintf(stderr, "%s\n", stats.describe_rates().c_str());
    return backend.report(stats.positions);
}

struct ChatArgs {
    GenerateArgs run;
    std::string system_prompt;
    std::string chat_template;
    CLI::App* cmd = nullptr;  // says whether -i and -y were given (run.c tells an empty prompt from none)
};

void add_chat(CLI::App& app, ChatArgs& a) {
    a.cmd = app.add_subcommand("chat", "Chat with a Llama 2 chat model (run.c's -m chat: flags and output)");
    add_model_options(a.cmd, a.run);
    add_sampling_options(a.cmd, a.run);
    add_mode_option(a.cmd);
    a.cmd->add_option("-y,--system", a.system_prompt, "system prompt (default: read from standard input)")
        ->group(kSamplingGroup);
    a.cmd->add_option("--chat-template", a.chat_template,
                      "llama2 or llama3 (default: the GGUF file's tokenizer.chat_template, else llama2)")
        ->group(kSamplingGroup);
    add_backend_options(a.cmd, a.run);
    set_examples(*a.cmd, {"llama-cl chat llama-2-7b-chat.bin -z tokenizer.bin -y \"You are terse.\"",
                          "llama-cl chat Llama-3.2-1B-Instruct-Q8_0.gguf -i \"Name three colours.\"",
                          "llama-cl llama-2-7b-chat.bin -m chat -z tokenizer.bin    (run.c's command line)"});
}

int run_chat(const ChatArgs& a) {
    const Checkpoint ck = open_model(a.run);
    const Config& c = ck.config();
    const std::optional<Fault> fault = fault_from_environment(c, "chat");  // a malformed one is an error on every backend
    const Tokenizer tokenizer = model_tokenizer(a.run, ck);
    Sampler sampler = make_sampler(a.run, c.vocab_size);
    ChatOptions options;
    if (a.cmd->count("-y")) options.system_prompt = a.system_prompt;
    if (a.cmd->count("-i")) options.user_prompt = a.run.prompt;
    options.steps = effective_steps(a.run.steps, c.seq_len);
    options.seq_len = c.seq_len;
    options.vocab_size = c.vocab_size;
    if (a.cmd->count("--chat-template")) {
        const std::optional<ChatTemplate> chosen = parse_chat_template(a.chat_template);
        if (!chosen)
            throw usage_error("--chat-template: \"" + a.chat_template + "\" is neither llama2 nor llama3");
        options.chat_template = *chosen;
    } else {
        options.chat_template = detect_chat_template(tokenizer.chat_template());
    }
    check_given_first_turn(tokenizer, options);  // before the backend's choice is printed
    // run.c's chat stops at -n positions in all; every turn's prompt is prefilled, its tokens sampled.
    Backend backend(a.run.backend, ck, fault, BackendRun{options.steps, options.steps, Work::decode, true, false});
    ChatStats stats;
    try {
        stats = chat(backend.driver(), tokenizer, sampler, options, stdin, stdout);
    } catch (const NonFiniteLogits& e) {
        return backend.ended_non_finite(e);
    }
    return backend.report(stats.positions);
}

struct PerplexityArgs {
    GenerateArgs run;
    std::string text_file;
    int context = 0;  // 0: the model's seq_len
    int stride = 0;   // 0: the context (windows that do not overlap)
    bool json = false;
    CLI::App* cmd = nullptr;
};

void add_perplexity(CLI::App& app, PerplexityArgs& a) {
    CLI::App* cmd = a.cmd = app.add_subcommand("perplexity", "Score a text file: mean negative log-likelihood and perplexity");
    add_model_options(cmd, a.run);
    const OptionGroup group(*cmd, "Scoring");
    cmd->add_option("-f", a.text_file, "the text to score")->required()->check(not_empty("a text file"));
    const CLI::Validator positive = decimal_integer(1, std::numeric_limits<int>::max(),
                                                    "a whole number from 1 to " +
                                                        std::to_string(std::numeric_limits<int>::max()),
                                                    "POSITIVE INTEGER");
    cmd->add_option("--context", a.context, "positions in a window, BOS included (default: the model's seq_len)")
        ->transform(positive);
    cmd->add_option("--stride", a.stride,
                    "text tokens from one window's start to the next (1..--context; default: --context, windows "
                    "that do not overlap)")
        ->transform(positive);
    cmd->add_flag("--json", a.json, "print the figures as one JSON object");
    add_backend_options(cmd, a.run);
    set_examples(*cmd, {"llama-cl perplexity stories15M.bin -z tokenizer.bin -f story.txt",
                        "llama-cl perplexity model.gguf -f wiki.test.raw --context 512 --stride 256",
                        "llama-cl perplexity stories15M.bin -z tokenizer.bin -f story.txt --json -q"});
}

// -f's text, whole. A pipe or device (-f /dev/stdin) is read as it comes, up to kMaxTextBytes, which an
// endless device reaches at once: encoding takes about 40 bytes of memory a byte of text.
std::string read_text(const std::string& path) {
    constexpr std::size_t kMaxTextBytes = std::size_t{32} << 20;
    errno = 0;  // before fopen: its failure's reason is the one to report
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"), std::fclose);
    std::string text;
    char buffer[1 << 16];
    if (file)
        for (std::size_t got; (got = std::fread(buffer, 1, sizeof buffer, file.get())) > 0;) {
            if (text.size() + got > kMaxTextBytes)
                throw Error(path + ": the text is larger than 32 MiB; score a part of it (head -c) with -f");
            text.append(buffer, got);
        }
    if (!file || std::ferror(file.get()))
        throw Error(path + ": cannot read the text (" + (errno ? std::strerror(errno) : "I/O error") +
                    "); check the path given to -f");
    // The tokenizer reads C strings, as run.c's encode does: a NUL would end the text there, silently.
    if (const std::size_t nul = text.find('\0'); nul != std::string::npos)
        throw Error(path + ": a NUL byte at offset " + std::to_string(nul) +
                    ": not UTF-8 text (UTF-16?); convert it (iconv -t UTF-8) or remove the NUL bytes");
    return text;
}

int run_perplexity(const PerplexityArgs& a) {
    const Checkpoint ck = open_model(a.run);
    const Config& c = ck.config();
    const std::optional<Fault> fault = fault_from_environment(c, "perplexity");  // a malformed one is an error on every backend
    const Tokenizer tokenizer = model_tokenizer(a.run, ck);
    PerplexityWindows windows;
    windows.context = a.context ? a.context : c.seq_len;
    if (windows.context > c.seq_len)
        throw usage_error("--context: must be at most the model's context, seq_len " + std::to_string(c.seq_len) +
                          " (got " + std::to_string(windows.context) + ")");
    windows.stride = a.stride ? a.stride : windows.context;
    if (windows.stride > windows.context)
        throw usage_error("--stride: must be at most --context, " + std::to_string(windows.context) +
                          ", or tokens between windows would go unscored (got " + std::to_string(windows.stride) + ")");
    const std::vector<int> tokens = encode_text(tokenizer, read_text(a.text_file), c.vocab_size, "the text");
    if (tokens.size() < 2)
        throw Error(a.text_file + ": the text is empty; perplexity needs at least one token to score");
    // A window holds at most --context positions, and at most the text's tokens but the last; the windows
    // run at least one position per token scored.
    Backend backend(a.run.backend, ck, fault,
                    BackendRun{static_cast<int>(std::min<std::size_t>(windows.context, tokens.size() - 1)),
                               static_cast<long long>(tokens.size() - 1), Work::prompt, true, false});
    // A window at a time as a status line, cleared at the end (on a terminal, without -q).
    std::optional<ProgressLine> progress(std::in_place, "perplexity: scoring " + counted(tokens.size() - 1, "token"));
    const auto start = std::chrono::steady_clock::now();
    PerplexityResult r;
    try {
        r = perplexity(backend.driver(), tokens, windows, [&](const PerplexityResult& so_far) {
            progress->update("perplexity: " + std::to_string(so_far.scored) + "/" + std::to_string(tokens.size() - 1) +
                             " tokens scored, perplexity " + number_text("%.4f", so_far.perplexity));
        });
    } catch (const NonFiniteLogits& e) {
        progress.reset();
        return backend.ended_non_finite(e);
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens_per_s = seconds > 0 ? static_cast<double>(r.positions) / seconds : 0.0;
    progress.reset();
    if (a.json) {
        const nlohmann::ordered_json j = {{"tokens", r.scored},        {"mean_nll", r.mean_nll},
                                  {"perplexity", r.perplexity}, {"windows", r.windows},
                                  {"context", windows.context}, {"stride", windows.stride},
                                  {"positions", r.positions},   {"tokens_per_s", tokens_per_s}};
        std::printf("%s\n", j.dump().c_str());
    } else {
        std::printf("tokens: %lld\nmean nll: %.6f\nperplexity: %.6f\n", r.scored, r.mean_nll, r.perplexity);
    }
    // The result first: a failed write is then the one line on stderr, not a second after the figures.
    flush_or_throw(stdout);
    if (!a.run.backend.quiet)
        std::fprintf(stderr, "perplexity: %s in %s, %.3f s, %.1f tokens/s\n", counted(r.positions, "position").c_str(),
                     counted(r.windows, "window").c_str(), seconds, tokens_per_s);
    return backend.report(static_cast<int>(std::min<long long>(r.positions, std::numeric_limits<int>::max())));
}

struct TokenizeArgs {
    std::string tokenizer, text;
    bool no_bos = false, special = false;
};

int run_tokenize(const TokenizeArgs& a) {
    const Tokenizer tokenizer = Tokenizer::for_model(a.tokenizer, a.tokenizer, false, 0, VocabFit::at_least);
    const std::vector<int> ids = tokenizer.encode(a.text, !a.no_bos, /*eos=*/false, a.special);
    std::string line;
    for (std::size_t i = 0; i < ids.size(); ++i) line += (i ? " " : "") + std::to_string(ids[i]);
    std::printf("%s\n", line.c_str());
    return 0;
}

std::string bytes_str(std::uint64_t bytes) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%llu (%.2f MiB)", static_cast<unsigned long long>(bytes),
                  static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

int run_devices() {
    std::printf("%s", format_device_table(list_devices()).c_str());
    return 0;
}

// What info adds for a GGUF file: its container, tensor types, RoPE and norm parameters and vocabulary.
std::string describe_gguf(const GgufFile& file, const Config& c) {
    std::map<std::string, int> types;
    for (const GgufTensor& t : file.tensors()) ++types[ggml_type_name(t.type)];
    std::string list;
    for (const auto& [name, n] : types) list += (list.empty() ? "" : ", ") + name + " " + std::to_string(n);
    char numbers[160];
    std::snprintf(numbers, sizeof numbers, "rope base: %g\nrope factors: %s\nnorm epsilon: %g\n",
                  static_cast<double>(c.rope_base),
                  c.rope_factors.empty() ? "none" : (std::to_string(c.rope_factors.size()) + " (rope_freqs)").c_str(),
                  static_cast<double>(c.norm_eps));
    std::string text = "format: GGUF version " + std::to_string(file.version()) + "\narchitecture: llama\ntensor types: " +
                       list + "\n" + numbers;
    if (!file.find("tokenizer.ggml.model")) return text + "vocabulary: none\n";
    const Tokenizer v = Tokenizer::from_gguf(file, c.vocab_size);
    std::string stops;
    for (int id : v.generation_stops()) stops += (stops.empty() ? "" : " ") + std::to_string(id);
    return text + "vocabulary: " + (v.byte_level() ? "byte-level BPE" : "SentencePiece") + ", " +
           std::to_string(v.size()) + " tokens; bos " + std::to_string(v.bos()) + ", eos " + std::to_string(v.eos()) +
           ", stops at " + stops + "; chat template " +
           (v.chat_template().empty()                                         ? "none"
            : detect_chat_template(v.chat_template()) == ChatTemplate::llama3 ? "llama3"
                                                                              : "llama2") +
           "\n";
}

int run_info(const std::string& path) {
    const Checkpoint ck = Checkpoint::open(path);
    const Config& c = ck.config();
    const ModelSize size(c);
    const std::string gguf = ck.file() == ModelFile::gguf ? describe_gguf(GgufFile::open(path), c) : "";
    std::printf("checkpoint: %s\n", path.c_str());
    if (ck.file() == ModelFile::gguf) {
        std::printf("%s", gguf.c_str());
    } else {
        std::printf("format: llama2.c version %d%s\n", ck.version(),
                    ck.version() == 0 ? " (legacy)" : ck.version() == 1 ? " (ak42 export)" : " (ak42 export, Q8_0)");
    }
    const std::string table = c.table_format ? ", embedding and classifier " + c.table_format->describe() : "";
    std::printf("weights: %s%s%s%s\n", ck.weight_format().describe().c_str(), table.c_str(),
                ck.load_note().empty() ? "" : "; ", ck.load_note().c_str());
    std::printf("dim: %d\nhidden_dim: %d\nn_layers: %d\nn_heads: %d\nn_kv_heads: %d\nvocab_size: %d\nseq_len: %d\n",
                c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len);
    std::printf("head_size: %d\nshared_classifier: %s\n", c.head_size(), c.shared_classifier ? "yes" : "no");
    std::printf("parameters: %llu\n", static_cast<unsigned long long>(size.total_params));
    std::printf("weight bytes: %s\n", bytes_str(size.weight_bytes()).c_str());
    std::printf("bytes per layer: %s\n", bytes_str(size.layer_bytes()).c_str());
    std::printf("kv cache bytes (full context): %s\n", bytes_str(size.kv_cache_bytes).c_str());
    // A run allocates the cache for the positions it can reach (-n), this much each.
    std::printf("kv cache bytes per position: %s\n", bytes_str(ModelSize(within_positions(c, 1)).kv_cache_bytes).c_str());
    std::printf("cpu reference activation bytes: %s\n", bytes_str(size.reference_activation_bytes).c_str());
    std::printf("cpu reference prompt batch bytes: %s, with every position's logits (perplexity, --compare-cpu) %s\n",
                bytes_str(ReferenceForward::batch_bytes(c, false)).c_str(),
                bytes_str(ReferenceForward::batch_bytes(c, true)).c_str());
    if (const std::uint64_t laid_out = ReferenceForward::laid_out_bytes(c); laid_out > 0)
        std::printf("cpu reference laid-out f32 matrices: %s, for runs of %d positions or more, within an eighth of "
                    "the machine's memory\n",
                    bytes_str(laid_out).c_str(), ReferenceForward::kLayOutPositions);
    else
        std::printf("cpu reference laid-out f32 matrices: none (%s)\n",
                    ck.weight_format().type != ElementType::f32
                        ? "the weights are not f32"
                        : ("over " + std::to_string(ReferenceForward::kLayOutBytes >> 20) + " MiB").c_str());
    return 0;
}

// The spelling of `option` that `args` used last (a message names the option as it was typed: CLI11
// names it by its long name), else its long name.
std::string spelled_as_given(const CLI::Option& option, const std::vector<std::string>& args) {
    for (auto arg = args.rbegin(); arg != args.rend(); ++arg)
        if (const std::string name = arg->substr(0, arg->find('=')); name.starts_with("-") && option.check_name(name))
            return name;
    return option.get_name();
}

// A parse error in `command` as report() prints it, the option named as typed in `args`. CLI11 words an
// option at the end of the line without its value as "-z: 1 required TEXT:TEXT missing", its own type
// names; say instead what the option takes.
std::string parse_error_message(const CLI::App& command, const CLI::ParseError& e, const std::vector<std::string>& args) {
    const std::string what = e.what();
    const std::size_t colon = what.find(": ");
    const CLI::Option* option = colon == std::string::npos ? nullptr : command.get_option_no_throw(what.substr(0, colon));
    if (!option || option->get_positional()) return what;
    const std::string name = spelled_as_given(*option, args);
    if (!dynamic_cast<const CLI::ArgumentMismatch*>(&e) || what.find(" required ", colon) == std::string::npos ||
        !what.ends_with(" missing"))
        return name + what.substr(colon);
    return name + ": needs a value after it: " + option->get_description();
}

// CLI11's own output (help, version) through stdout's buffer: its std::endl would flush a failed write
// early and lose the reason.
int print_exit(const CLI::App& app, const CLI::Error& e) {
    std::ostringstream text;
    const int code = app.exit(e, text);
    std::fputs(text.str().c_str(), stdout);
    return code;
}

// Output that did not arrive must not pass for success.
int with_output_checked(int code) {
    const std::string failure = output_failure(stdout);
    if (failure.empty()) return code;
    report(failure);
    return code == 0 ? 1 : code;
}

// Every command's arguments and the CLI11 app that fills them. parse() reads argv and checks what needs
// no file; run() runs the command parsed. The command-line fuzz target calls parse() alone.
class CommandLine {
public:
    CommandLine();
    // The exit status when argv already decides it (help, version, a usage error), else nullopt.
    std::optional<int> parse(int argc, char** argv);
    int run();

private:
    std::string model_in_use() const;  // for a message with nothing more precise to name
    std::string command_list() const;  // "generate, tokenize, ..."
    int run_help() const;
    const CLI::App& command_parsed() const;  // the command argv named, else the app

    CLI::App app_{"llama-cl: run llama2.c checkpoints on any OpenCL device", "llama-cl"};
    GenerateArgs gen_;
    TokenizeArgs tok_;
    std::string info_path_;
    BenchArgs bench_;
    CheckArgs check_;
    QuantizeArgs quant_;
    ChatArgs chat_;
    PerplexityArgs perplexity_;
    std::string help_topic_;  // help's command; empty: the app's
    CLI::App* generate_ = nullptr;
    CLI::App* tokenize_ = nullptr;
    CLI::App* help_ = nullptr;
};

CommandLine::CommandLine() {
    // Before any command is added: each takes the app's formatter when it is made.
    app_.formatter(std::make_shared<HelpFormatter>(help_width()));
    app_.require_subcommand(1);
    app_.set_version_flag("--version", "llama-cl 0.1.0");
    // An option given twice takes its last value, as run.c's argument loop does (CLI11 would refuse it
    // with a count of its own internals); inherited by every command added below.
    app_.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

    add_generate(app_, gen_);
    generate_ = app_.get_subcommand("generate");
    tokenize_ = app_.add_subcommand("tokenize", "Print a text's token ids: BOS, then run.c's encode() (a GGUF "
                                                "vocabulary's: SentencePiece or byte-level BPE)");
    tokenize_->add_option("tokenizer", tok_.tokenizer, "tokenizer.bin, or a GGUF file (its vocabulary)")
        ->required()
        ->check(not_empty("a tokenizer file"));
    tokenize_->add_option("text", tok_.text, "text to encode")->required();
    tokenize_->add_flag("--no-bos", tok_.no_bos, "leave BOS out");
    tokenize_->add_flag("--special", tok_.special, "let control tokens' texts match (GGUF vocabularies)");
    set_examples(*tokenize_, {"llama-cl tokenize tokenizer.bin \"Once upon a time\"",
                              "llama-cl tokenize Llama-3.2-1B-Instruct-Q8_0.gguf \"<|eot_id|>\" --special",
                              "llama-cl tokenize tokenizer.bin --no-bos -- \"-x\"    (a text that starts with '-')"});
    CLI::App* info = app_.add_subcommand("info", "Print a checkpoint's format, shape and memory contract");
    info->add_option("checkpoint", info_path_, "model file: a llama2.c checkpoint or a GGUF file")->required()->check(not_empty("a checkpoint file"));
    set_examples(*info, {"llama-cl info stories15M.bin", "llama-cl info Llama-3.2-1B-Instruct-Q8_0.gguf",
                         "llama-cl info stories15M-v2.bin    (a llama2.c version-2 file)"});
    CLI::App* quantize = app_.add_subcommand(
        "quantize", "Write a model's weights in another format: a GGUF file that llama.cpp loads (OUT named *.gguf), or "
                    "a llama2.c version-2 (Q8_0) checkpoint, as llama2.c's export.py --version 2 writes it");
    quantize->add_option("input", quant_.input,
                         "the model: a llama2.c checkpoint or a GGUF file (version 2 output: fp32 weights only)")
        ->required()
        ->check(not_empty("a checkpoint file"));
    quantize->add_option("output", quant_.output, "file to write: *.gguf for GGUF, any other name for llama2.c version 2")
        ->required()
        ->check(not_empty("a file to write"));
    quantize->add_option("--type", quant_.type,
                         "GGUF output: every matrix's type, " + output_type_names() +
                             ", as ggml's reference quantizers write them; norms stay f32 (default: " +
                             default_output_type() + ")");
    quantize->add_option("--classifier-type", quant_.classifier_type,
                         "GGUF output: the classifier's type (output.weight, or token_embd.weight where the embedding "
                         "table is the classifier), of the same four (default: --type's; llama-quantize keeps it in "
                         "Q8_0 or Q6_K beside Q4_0 layers)");
    quantize->add_option("--fallback-type", quant_.fallback_type,
                         "GGUF output: the type of a matrix whose rows are not whole blocks of --type's 32 weights; f16 "
                         "where this does not fit either (default: " + std::string(default_output_type()) + ")");
    quantize->add_option("-z", quant_.tokenizer,
                         "GGUF output: the vocabulary, a llama2.c tokenizer.bin (needed for llama2.c input; default for "
                         "GGUF input: its own)")
        ->check(not_empty("a tokenizer file"));
    quantize->add_option("--group-size", quant_.group_size,
                         "version 2 output: weights per fp32 scale, a divisor of dim and hidden_dim (default: the largest "
                         "power of two up to 64 that divides both)")
        ->transform(decimal_integer(1, std::numeric_limits<int>::max(), "a whole number from 1 to " +
                                    std::to_string(std::numeric_limits<int>::max()), "POSITIVE INTEGER"));
    quantize->add_flag("--force", quant_.force, "replace OUT where it exists (never the input)");
    set_examples(*quantize, {"llama-cl quantize stories15M.bin stories15M.gguf -z tokenizer.bin",
                             "llama-cl quantize model.gguf model-q4_0.gguf --type q4_0",
                             "llama-cl quantize stories15M.bin stories15M-v2.bin --group-size 64"});

    CLI::App* devices = app_.add_subcommand("devices", "List every OpenCL platform and device");
    set_examples(*devices, {"llama-cl devices", "llama-cl generate stories15M.bin -z tokenizer.bin --device 1.0    "
                                                "(platform 1, device 0 as listed)",
                            "llama-cl bench stories15M.bin --device nvidia    (a name substring)"});
    add_bench_command(app_, bench_);
    add_check_command(app_, check_);
    add_chat(app_, chat_);
    add_perplexity(app_, perplexity_);
    help_ = app_.add_subcommand("help", "Print the commands, or one command's options and examples");
    help_->add_option("command", help_topic_, "the command (default: all of them)");
    set_examples(*help_, {"llama-cl help", "llama-cl help generate", "llama-cl generate --help    (the same)"});
    set_examples(app_, {"llama-cl generate stories15M.bin -z tokenizer.bin -i \"Once upon a time\"",
                        "llama-cl stories15M.bin -n 256 -i \"Once upon a time\"    (run.c's command line)",
                        "llama-cl help generate"});
}

std::optional<int> CommandLine::parse(int argc, char** argv) {
    // No command at all: a short usage, as a usage error (--help describes every command on stdout).
    if (argc <= 1) {
        const std::size_t width = help_width();
        std::fprintf(stderr, "%s\n%s\n%s\n",
                     wrap("Usage: llama-cl COMMAND [OPTIONS], or llama-cl MODEL [run.c's flags] to generate", width, 2).c_str(),
                     wrap("Commands: " + command_list(), width, 2).c_str(),
                     wrap("llama-cl help COMMAND prints a command's options and examples; llama-cl --help describes "
                          "every command", width, 2).c_str());
        return 2;
    }
    std::vector<std::string> command_names;
    for (const CLI::App* command : std::as_const(app_).get_subcommands(std::function<bool(const CLI::App*)>()))
        command_names.push_back(command->get_name());
    std::vector<std::string> args = with_run_c_command({argv, argv + argc}, command_names);
    // CLI11 prints the version as soon as it meets the flag, whatever follows.
    if (args[1] == "--version" && args.size() > 2) {
        report("--version takes no arguments, got '" + args[2] + "' (see llama-cl --help)");
        return 2;
    }
    // CLI11 calls an unknown command, or an option before any, "A subcommand is required"; name the word it
    // did not know instead.
    if (args[1][0] == '-' && !app_.get_option_no_throw(args[1].substr(0, args[1].find('=')))) {
        report(unexpected_arguments_message(app_, {args[1]}));
        return 2;
    }
    if (args[1][0] != '-' && std::find(command_names.begin(), command_names.end(), args[1]) == command_names.end()) {
        report("unknown command '" + args[1] + "'; the commands are " + command_list() + see_help(app_));
        return 2;
    }
    std::vector<const char*> words;
    for (const std::string& arg : args) words.push_back(arg.c_str());
    try {
        app_.parse(static_cast<int>(words.size()), words.data());
        gen_.tokenizer_given = generate_->count("-z") > 0;
        chat_.run.tokenizer_given = chat_.cmd->count("-z") > 0;
        perplexity_.run.tokenizer_given = perplexity_.cmd->count("-z") > 0;
        check_.tokenizer_given = app_.get_subcommand("check")->count("-z") > 0;
        if (generate_->parsed()) check_generate_args(gen_);
        if (chat_.cmd->parsed()) check_generate_args(chat_.run);
        if (perplexity_.cmd->parsed()) check_generate_args(perplexity_.run);
    } catch (const CLI::Success& e) {  // --help, --help-all, --version
        return with_output_checked(print_exit(app_, e));
    } catch (const CLI::ExtrasError&) {
        report(unexpected_arguments_message(command_parsed(), app_.remaining(true)));
        return 2;
    } catch (const CLI::ParseError& e) {
        // CLI11 takes a text such as "-x" for an option and then misses the text itself.
        const bool dashed_text = tokenize_->parsed() && !tok_.tokenizer.empty() && tok_.text.empty() &&
                                 std::any_of(args.begin() + 2, args.end(), [](const std::string& arg) { return arg[0] == '-'; });
        report(parse_error_message(command_parsed(), e, args) +
               (dashed_text ? "; a text that starts with '-' goes after --, as in: tokenize TOKENIZER -- -x" : "") +
               see_help(command_parsed()));
        return 2;
    } catch (const Error& e) {
        report(e.what());
        return e.exit_code();
    }
    return std::nullopt;
}

const CLI::App& CommandLine::command_parsed() const {
    const std::vector<CLI::App*> parsed = app_.get_subcommands();
    return parsed.empty() ? app_ : *parsed.front();
}

std::string CommandLine::command_list() const {
    std::string names;
    for (const CLI::App* command : app_.get_subcommands(std::function<bool(const CLI::App*)>()))
        names += (names.empty() ? "" : ", ") + command->get_name();
    return names;
}

// help [COMMAND]: what --help prints, for the app or that command.
int CommandLine::run_help() const {
    if (help_topic_.empty()) {
        std::fputs(app_.get_formatter()->make_help(&app_, app_.get_name(), CLI::AppFormatMode::Normal).c_str(), stdout);
        return 0;
    }
    const std::vector<const CLI::App*> named = app_.get_subcommands(
        std::function<bool(const CLI::App*)>([this](const CLI::App* c) { return c->get_name() == help_topic_; }));
    if (named.empty())
        throw usage_error("help: unknown command '" + help_topic_ + "'; the commands are " + command_list() +
                          " (see llama-cl help)");
    std::fputs(named.front()->help(app_.get_name()).c_str(), stdout);
    return 0;
}

// The command and the file it runs on.
std::string CommandLine::model_in_use() const {
    const auto on = [](const char* command, const std::string& path) {
        return std::string(command) + (path.empty() ? "" : " on " + path);
    };
    if (generate_->parsed()) return on("generate", gen_.checkpoint);
    if (chat_.cmd->parsed()) return on("chat", chat_.run.checkpoint);
    if (perplexity_.cmd->parsed()) return on("perplexity", perplexity_.run.checkpoint);
    if (app_.got_subcommand("info")) return on("info", info_path_);
    if (app_.got_subcommand("quantize")) return on("quantize", quant_.input);
    if (app_.got_subcommand("bench")) return on("bench", bench_.synthetic.empty() ? bench_.checkpoint : "synthetic:" + bench_.synthetic);
    if (app_.got_subcommand("check")) return on("check", check_.checkpoint);
    return "the command";
}

int CommandLine::run() {
    try {
        if (generate_->parsed()) return with_output_checked(run_generate(gen_));
        if (chat_.cmd->parsed()) return with_output_checked(run_chat(chat_));
        if (perplexity_.cmd->parsed()) return with_output_checked(run_perplexity(perplexity_));
        if (tokenize_->parsed()) return with_output_checked(run_tokenize(tok_));
        if (help_->parsed()) return with_output_checked(run_help());
        if (app_.got_subcommand("info")) return with_output_checked(run_info(info_path_));
        if (app_.got_subcommand("quantize")) return with_output_checked(run_quantize(quant_));
        if (app_.got_subcommand("devices")) return with_output_checked(run_devices());
        if (app_.got_subcommand("bench")) return with_output_checked(run_bench(bench_));
        if (app_.got_subcommand("check")) return with_output_checked(run_check_command(check_));
    } catch (const ReaderGone&) {
        return 0;
    } catch (const Error& e) {
        report(e.what());
        return e.exit_code();
    } catch (const std::bad_alloc&) {
        report("out of host memory: " + model_in_use() +
               " needs more than this process may allocate (free memory, ulimit -v); use a machine with more, a "
               "shorter run (-n), or for a device a smaller --layers-per-offload");
        return 1;
    } catch (const cl::Error& e) {
        // The runtime turns the errors it expects into Errors with the capacity plan; this is the net
        // for the rest (drivers that allocate lazily report a shortage at the first use of a buffer).
        const bool memory = e.err() == CL_MEM_OBJECT_ALLOCATION_FAILURE || e.err() == CL_OUT_OF_RESOURCES ||
                            e.err() == CL_OUT_OF_HOST_MEMORY;
        report("OpenCL error: " + describe(e) +
               (memory ? " (the device is out of memory: try a smaller --layers-per-offload or --finalize=cpu)" : ""));
        return 1;
    } catch (const std::exception& e) {
        report(std::string("internal error: ") + e.what());
        return 1;
    }
    return 2;
}

}  // namespace

int run_cli(int argc, char** argv) {
    CommandLine command_line;
    if (const std::optional<int> code = command_line.parse(argc, argv)) return *code;
    return command_line.run();
}

int parse_command_line(int argc, char** argv) {
    CommandLine command_line;
    return command_line.parse(argc, argv).value_or(-1);
}

}  // namespace llamacl
