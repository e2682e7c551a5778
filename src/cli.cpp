#include "llamacl/cli.hpp"

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ctime>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <unistd.h>
#include <utility>

#include "llamacl/bench_command.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/compare.hpp"
#include "llamacl/device.hpp"
#include "llamacl/device_forward.hpp"
#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/generate.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/runtime_args.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/tokenizer.hpp"

namespace llamacl {

namespace {

struct GenerateArgs {
    std::string checkpoint;
    std::string tokenizer = "tokenizer.bin";
    double temperature = 1.0;  // run.c parses with atof and stores a float; so do we
    double topp = 0.9;
    long long seed = 0;        // 0: seed from the clock
    int steps = 256;
    std::string prompt;
    std::string backend = "auto";
    std::string weights;  // empty: the file's own format
    RuntimeArgs runtime;
    bool verbose = false;
    bool compare_cpu = false;
    double tolerance = kDefaultTolerance;
};

void add_generate(CLI::App& app, GenerateArgs& a) {
    CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt (run.c-compatible flags and output)");
    cmd->add_option("checkpoint", a.checkpoint, "llama2.c checkpoint (.bin, version 0, 1 or 2)")->required();
    cmd->add_option("-z", a.tokenizer, "tokenizer file (llama2.c tokenizer.bin format)")->capture_default_str();
    cmd->add_option("-t", a.temperature, "temperature in [0, inf); 0 is greedy")->capture_default_str();
    cmd->add_option("-p", a.topp, "top-p (nucleus) in [0, 1]; 0 or 1 samples from the whole distribution")
        ->capture_default_str();
    cmd->add_option("-s", a.seed, "random seed; 0 seeds from the clock")
        // Decimal, as run.c's atoi reads it, and in range (the conversion would saturate silently, every
        // huge seed the same).
        ->transform(decimal_integer(std::numeric_limits<long long>::min(), std::numeric_limits<long long>::max(),
                                    "an integer from -2^63 to 2^63-1", "INTEGER"))
        ->capture_default_str();
    cmd->add_option("-n", a.steps, "positions to run, prompt included; 0 means the whole context (seq_len)")
        ->capture_default_str();
    cmd->add_option("-i", a.prompt, "input prompt");
    cmd->add_option("--backend", a.backend,
                    "where the forward pass runs: opencl, cpu (the reference), or auto (OpenCL when a device "
                    "exists, else cpu)")
        ->check(CLI::IsMember({"auto", "opencl", "cpu"}))
        ->capture_default_str();
    add_weights_option(*cmd, a.weights);
    add_runtime_options(*cmd, a.runtime);
    cmd->add_flag("--compare-cpu", a.compare_cpu,
                  "run the CPU reference in lockstep and compare every device boundary with it; the last stderr "
                  "line names the first divergence (token, layer, operation), exit status 3 if there is one. "
                  "Self-test: LLAMACL_INJECT_FAULT=layer:L,op:OP (or op:final_norm / op:logits) corrupts that "
                  "device result on purpose");
    cmd->add_option("--tolerance", a.tolerance,
                    "--compare-cpu: a boundary diverges when its max abs error exceeds this times max(1, the "
                    "reference tensor's largest magnitude)")
        ->capture_default_str();
    cmd->add_flag("-v,--verbose", a.verbose,
                  "print the device, capacity plan and per-token counters on stderr (with --compare-cpu: the "
                  "boundary tables of the first token and of the first diverging token)");
}

void check_generate_args(const GenerateArgs& a) {
    if (!(a.temperature >= 0.0)) throw usage_error("-t: temperature must be >= 0 (got " + std::to_string(a.temperature) + ")");
    if (!(a.topp >= 0.0 && a.topp <= 1.0)) throw usage_error("-p: top-p must be in [0, 1] (got " + std::to_string(a.topp) + ")");
    if (a.steps < 0) throw usage_error("-n: steps must be >= 0 (got " + std::to_string(a.steps) + ")");
    if (!(a.tolerance > 0)) throw usage_error("--tolerance: must be positive");
    if (a.backend == "cpu") {
        if (a.compare_cpu)
            throw usage_error("--compare-cpu compares an OpenCL device with the CPU reference; it needs --backend opencl or auto");
        if (a.runtime.shapes_the_runtime())
            throw usage_error(std::string(RuntimeArgs::device_only_options) +
                              " apply to an OpenCL device, not to --backend cpu");
    }
}

// Opens the OpenCL device for --backend opencl/auto; nullopt when auto finds no OpenCL at all.
std::optional<Device> open_device(const GenerateArgs& a) {
    if (a.backend == "cpu") return std::nullopt;
    try {
        return Device::open(a.runtime.platform, a.runtime.device);
    } catch (const Error& e) {
        // auto falls back to the reference only when there is no OpenCL at all; a selector that
        // matches nothing is still the user's mistake.
        if (a.backend == "auto" && a.runtime.platform.empty() && a.runtime.device.empty()) {
            // Neither can the CPU reference honour flags that ask for a device.
            if (a.compare_cpu)
                throw Error(std::string("--compare-cpu: no OpenCL device to compare with the CPU reference (") +
                            e.what() + "); drop --compare-cpu to run on the CPU reference alone");
            if (a.runtime.shapes_the_runtime())
                throw Error(std::string(e.what()) + "; " + RuntimeArgs::device_only_options +
                            " need one: drop them to run on the CPU reference");
            std::fprintf(stderr, "llama-cl: no OpenCL device (%s); using the CPU reference\n", e.what());
            return std::nullopt;
        }
        throw;
    }
}

void print_per_token(const RuntimeCounters& total, int positions) {
    if (positions <= 0) return;
    const double n = positions;
    std::fprintf(stderr,
                 "per token: %.1f enqueues, %.2f host waits, %.0f weight bytes uploaded, %.0f input bytes uploaded, "
                 "%.0f bytes read\n",
                 static_cast<double>(total.enqueues) / n, static_cast<double>(total.host_waits) / n,
                 static_cast<double>(total.weight_bytes_uploaded) / n,
                 static_cast<double>(total.input_bytes_uploaded) / n, static_cast<double>(total.bytes_read) / n);
}

int run_generate(const GenerateArgs& a) {
    check_generate_args(a);
    const Checkpoint ck = with_weights(Checkpoint::open(a.checkpoint), weights_format(a.weights));
    const Config& c = ck.config();
    const Tokenizer tokenizer = Tokenizer::load(a.tokenizer, c.vocab_size);
    const int steps = effective_steps(a.steps, c.seq_len);
    const std::vector<int> prompt = encode_prompt(tokenizer, a.prompt, steps, c.seq_len, c.vocab_size);
    // run.c: an unsigned seed; 0 means "from the clock"; negative values wrap as atoi's int would.
    std::uint64_t seed = static_cast<std::uint64_t>(a.seed);
    if (seed == 0) seed = static_cast<unsigned int>(std::time(nullptr));
    Sampler sampler(c.vocab_size, static_cast<float>(a.temperature), static_cast<float>(a.topp), seed);

    std::optional<Device> device = open_device(a);
    std::unique_ptr<Forward> model;
    DeviceForward* on_device = nullptr;
    std::unique_ptr<LockstepCompare> compare;  // drives the device and the reference together
    if (device) {
        auto forward = std::make_unique<DeviceForward>(*device, ck, device_options(a.runtime, device->info()));
        on_device = forward.get();
        if (const char* fault = std::getenv("LLAMACL_INJECT_FAULT"); fault && *fault) {
            on_device->inject_fault(parse_fault(fault, c));
            std::fprintf(stderr, "llama-cl: LLAMACL_INJECT_FAULT=%s: corrupting that device result (self-test of --compare-cpu)\n", fault);
        }
        model = std::move(forward);
        if (a.compare_cpu) compare = std::make_unique<LockstepCompare>(*on_device, ck, a.tolerance);
        if (a.verbose) {
            std::fprintf(stderr, "device: %s (%s)\n%s%s\nkernels: %s; %s weights\nschedule: %s\n",
                         device->info().name.c_str(), device->info().platform_name.c_str(),
                         on_device->plan().describe().c_str(),
                         on_device->host_mirror() ? "; streamed from a pinned mirror of the layers" : "",
                         on_device->shape().describe().c_str(), c.weight_format.describe().c_str(),
                         describe_schedule(on_device->token_groups(), on_device->per_op_reason()).c_str());
        }
    } else {
        model = std::make_unique<ReferenceForward>(ck);
        if (a.verbose) std::fprintf(stderr, "backend: CPU reference\n");
    }
    const RuntimeCounters before = on_device ? on_device->counters() : RuntimeCounters{};
    Forward& driver = compare ? static_cast<Forward&>(*compare) : *model;
    const GenerateStats stats = generate(driver, tokenizer, sampler, prompt, steps, stdout);
    if (stats.positions > 1) std::fprintf(stderr, "achieved tok/s: %f\n", stats.tokens_per_s);
    if (on_device && a.verbose) print_per_token(on_device->counters() - before, stats.positions);
    if (!compare) return 0;
    if (a.verbose) {
        std::fprintf(stderr, "compare-cpu: token 0\n%s", format_boundary_table(compare->first_token_table()).c_str());
        if (compare->first_divergence() && compare->first_divergence()->pos != 0)
            std::fprintf(stderr, "compare-cpu: token %d\n%s", compare->first_divergence()->pos,
                         format_boundary_table(compare->divergent_token_table()).c_str());
    }
    std::fprintf(stderr, "%s\n", compare->summary().c_str());
    return compare->first_divergence() ? 3 : 0;
}

struct TokenizeArgs {
    std::string tokenizer, text;
};

int run_tokenize(const TokenizeArgs& a) {
    const Tokenizer tokenizer = Tokenizer::load(a.tokenizer, 0);
    const std::vector<int> ids = tokenizer.encode(a.text, /*bos=*/true, /*eos=*/false);
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

int run_info(const std::string& path) {
    const Checkpoint ck = Checkpoint::open(path);
    const Config& c = ck.config();
    const ModelSize size(c);
    std::printf("checkpoint: %s\n", path.c_str());
    std::printf("format: llama2.c version %d%s\n", ck.version(),
                ck.version() == 0 ? " (legacy)" : ck.version() == 1 ? " (ak42 export)" : " (ak42 export, Q8_0)");
    std::printf("weights: %s\n", ck.weight_format().describe().c_str());
    std::printf("dim: %d\nhidden_dim: %d\nn_layers: %d\nn_heads: %d\nn_kv_heads: %d\nvocab_size: %d\nseq_len: %d\n",
                c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len);
    std::printf("head_size: %d\nshared_classifier: %s\n", c.head_size(), c.shared_classifier ? "yes" : "no");
    std::printf("parameters: %llu\n", static_cast<unsigned long long>(size.total_params));
    std::printf("weight bytes: %s\n", bytes_str(size.weight_bytes()).c_str());
    std::printf("bytes per layer: %s\n", bytes_str(size.layer_bytes()).c_str());
    std::printf("kv cache bytes (full context): %s\n", bytes_str(size.kv_cache_bytes).c_str());
    std::printf("cpu reference activation bytes: %s\n", bytes_str(size.reference_activation_bytes).c_str());
    return 0;
}

struct QuantizeArgs {
    std::string input, output;
    int group_size = 0;  // 0: default_group_size
};

int run_quantize(const QuantizeArgs& a) {
    const Checkpoint ck = Checkpoint::open(a.input);
    const int group_size = a.group_size != 0 ? a.group_size : default_group_size(ck.config());
    // A live progress line only where someone watches it, and only when there is time to watch.
    const bool live = ::isatty(STDERR_FILENO) && ModelSize(ck.config()).weight_bytes() >= (256ull << 20);
    write_version2(ck, a.output, group_size, [&](std::uint64_t done, std::uint64_t total) {
        if (live) std::fprintf(stderr, "\rquantizing: %.1f of %.1f GB", static_cast<double>(done) / 1e9,
                               static_cast<double>(total) / 1e9);
    });
    const Checkpoint written = Checkpoint::open(a.output);  // what a reader will see
    std::fprintf(stderr, "%swrote %s: llama2.c version 2, %s weights, %s bytes\n", live ? "\n" : "", a.output.c_str(),
                 written.weight_format().describe().c_str(), std::to_string(std::filesystem::file_size(a.output)).c_str());
    return 0;
}

// Output that did not arrive must not pass for success.
int with_output_checked(int code) {
    const std::string failure = output_failure(stdout);
    if (failure.empty()) return code;
    std::fprintf(stderr, "llama-cl: %s\n", failure.c_str());
    return code == 0 ? 1 : code;
}

}  // namespace

int run_cli(int argc, char** argv) {
    CLI::App app{"llama-cl: run llama2.c checkpoints on any OpenCL device", "llama-cl"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "llama-cl 0.1.0");

    GenerateArgs gen;
    add_generate(app, gen);
    TokenizeArgs tok;
    CLI::App* tokenize = app.add_subcommand("tokenize", "Print run.c's encode(text, bos=1, eos=0) token ids");
    tokenize->add_option("tokenizer", tok.tokenizer, "tokenizer file")->required();
    tokenize->add_option("text", tok.text, "text to encode")->required();
    std::string info_path;
    CLI::App* info = app.add_subcommand("info", "Print a checkpoint's format, shape and memory contract");
    info->add_option("checkpoint", info_path, "llama2.c checkpoint")->required();

    QuantizeArgs quant;
    CLI::App* quantize = app.add_subcommand(
        "quantize", "Write a llama2.c version-2 (Q8_0) checkpoint from an fp32 one, as llama2.c's export.py --version 2 does");
    quantize->add_option("input", quant.input, "fp32 llama2.c checkpoint (version 0 or 1)")->required();
    quantize->add_option("output", quant.output, "version-2 checkpoint to write")->required();
    quantize->add_option("--group-size", quant.group_size,
                         "weights per fp32 scale, a divisor of dim and hidden_dim (default: the largest power of two up "
                         "to 64 that divides both)")
        ->transform(decimal_integer(1, std::numeric_limits<int>::max(), "a whole number from 1 to " +
                                    std::to_string(std::numeric_limits<int>::max()), "POSITIVE INTEGER"));

    app.add_subcommand("devices", "List every OpenCL platform and device");
    BenchArgs bench;
    add_bench_command(app, bench);

    // CLI11 calls an unknown command "A subcommand is required"; name the word it did not know instead.
    if (argc > 1 && argv[1][0] != '-') {
        std::string names;
        bool known = false;
        for (const CLI::App* command : std::as_const(app).get_subcommands(std::function<bool(const CLI::App*)>())) {
            names += (names.empty() ? "" : ", ") + command->get_name();
            known = known || command->get_name() == argv[1];
        }
        if (!known) {
            std::fprintf(stderr, "llama-cl: unknown command '%s'; the commands are %s (see llama-cl --help)\n", argv[1],
                         names.c_str());
            return 2;
        }
    }
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return with_output_checked(app.exit(e));
    } catch (const CLI::CallForAllHelp& e) {
        return with_output_checked(app.exit(e));
    } catch (const CLI::CallForVersion& e) {
        return with_output_checked(app.exit(e));
    } catch (const CLI::ParseError& e) {
        // CLI11 takes a text such as "-x" for an option and then misses the text itself.
        const bool dashed_text = tokenize->parsed() && !tok.tokenizer.empty() && tok.text.empty();
        std::fprintf(stderr, "llama-cl: %s%s (see llama-cl --help)\n", e.what(),
                     dashed_text ? "; a text that starts with '-' goes after --, as in: tokenize TOKENIZER -- -x" : "");
        return 2;
    }

    try {
        if (app.got_subcommand("generate")) return with_output_checked(run_generate(gen));
        if (app.got_subcommand("tokenize")) return with_output_checked(run_tokenize(tok));
        if (app.got_subcommand("info")) return with_output_checked(run_info(info_path));
        if (app.got_subcommand("quantize")) return with_output_checked(run_quantize(quant));
        if (app.got_subcommand("devices")) return with_output_checked(run_devices());
        if (app.got_subcommand("bench")) return with_output_checked(run_bench(bench));
    } catch (const Error& e) {
        std::fprintf(stderr, "llama-cl: %s\n", e.what());
        return e.exit_code();
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "llama-cl: out of host memory\n");
        return 1;
    } catch (const cl::Error& e) {
        // The runtime turns the errors it expects into Errors with the capacity plan; this is the net
        // for the rest (drivers that allocate lazily report a shortage at the first use of a buffer).
        const bool memory = e.err() == CL_MEM_OBJECT_ALLOCATION_FAILURE || e.err() == CL_OUT_OF_RESOURCES ||
                            e.err() == CL_OUT_OF_HOST_MEMORY;
        std::fprintf(stderr, "llama-cl: OpenCL error: %s%s\n", describe(e).c_str(),
                     memory ? " (the device is out of memory: try a smaller --layers-per-offload or --finalize=cpu)" : "");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "llama-cl: internal error: %s\n", e.what());
        return 1;
    }
    return 2;
}

}  // namespace llamacl
