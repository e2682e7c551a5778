#include "llamacl/bench_command.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "llamacl/atomic_file.hpp"
#include "llamacl/bandwidth_probes.hpp"
#include "llamacl/number_text.hpp"
#include "llamacl/progress.hpp"
#include "llamacl/bench.hpp"
#include "llamacl/bench_report.hpp"
#include "llamacl/compare.hpp"
#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/help_format.hpp"
#include "llamacl/roofline_svg.hpp"
#include "llamacl/synthetic.hpp"

namespace llamacl {

namespace {

constexpr std::uint64_t kSyntheticSeed = 1;  // --synthetic weights; any fixed seed gives the same speed

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

void check_bench_args(const BenchArgs& a) {
    if (a.checkpoint.empty() == a.synthetic.empty())
        throw usage_error("bench: give either a CHECKPOINT or --synthetic PRESET (one of " + joined(preset_names()) + ")");
    if (!a.synthetic.empty() && !preset_config(a.synthetic))
        throw usage_error("--synthetic: unknown preset '" + a.synthetic + "'; presets: " + joined(preset_names()));
}

Checkpoint load_model(const BenchArgs& a) {
    if (a.synthetic.empty()) return with_weights(Checkpoint::open(a.checkpoint), weights_format(a.weights));
    const ProgressLine progress("bench: writing the synthetic " + a.synthetic + " model");
    return with_weights(Checkpoint::from_image(synthetic_checkpoint_image(*preset_config(a.synthetic), 0, kSyntheticSeed),
                                               "synthetic:" + a.synthetic),
                        weights_format(a.weights));
}

}  // namespace

void add_bench_command(CLI::App& app, BenchArgs& a) {
    CLI::App* cmd = app.add_subcommand(
        "bench", "Measure decode tokens/s, bytes per token, device bandwidth and the roofline on an OpenCL device");
    cmd->add_option("checkpoint", a.checkpoint, "llama2.c checkpoint (or --synthetic)")
        ->check(not_empty("a checkpoint file"));
    cmd->add_option("--synthetic", a.synthetic,
                    "benchmark a seeded random model of this shape, built in memory: " + joined(preset_names()))
        ->check(not_empty("a preset: " + joined(preset_names())));
    cmd->add_option("-n,--tokens", a.tokens, "decode tokens timed per run")
        ->transform(decimal_int())
        ->capture_default_str();
    cmd->add_option("--context", a.context,
                    "positions run untimed before the timed tokens (clamped to seq_len - tokens: a large value "
                    "times the last positions of the context)")
        ->transform(decimal_int())
        ->capture_default_str();
    cmd->add_option("--prompt", a.prompt,
                    "also time a prefill of this many prompt positions from position 0 (tokens/s, flops, and the "
                    "share of the device's measured FMA throughput, and on tensor cores of theirs)")
        ->transform(decimal_int())
        ->capture_default_str();
    cmd->add_option("--runs", a.runs, "timed runs; tokens/s is their median")
        ->transform(decimal_int())
        ->capture_default_str();
    add_weights_option(*cmd, a.weights);
    add_runtime_options(*cmd, a.runtime);
    cmd->add_option("--probe-mib", a.probe_mib,
                    "bandwidth probe buffer size in whole MiB (default: 8 x the device's last-level cache, 64 to 1024, within "
                    "the largest allocation and global memory / 4; on a CPU device halved to fit the address space)")
        ->transform(positive_number());
    cmd->add_flag("--profile", a.profile, "add a per-kernel table from OpenCL event timestamps");
    cmd->add_flag("--json", a.json, "print one JSON object instead of the text report");
    cmd->add_option("--plot", a.plot, "write the roofline as an SVG file: copy bandwidth (and with --prompt FMA throughput, and on tensor "
                    "cores theirs, dashed) as the roof, each --profile kernel, the whole token (and the whole prompt) as "
                    "points")
        ->check(not_empty("a file name, e.g. --plot roofline.svg"))
        ->needs("--profile");
    cmd->add_flag("-q,--quiet", a.quiet, "no progress lines on stderr (shown only on a terminal) while bench measures");
    set_examples(*cmd, {"llama-cl bench stories15M.bin", "llama-cl bench --synthetic tiny -n 64 --runs 5",
                        "llama-cl bench stories15M.bin --prompt 128 --profile --plot roofline.svg"});
}

int run_bench(const BenchArgs& a, std::FILE* out) {
    check_bench_args(a);
    set_progress_quiet(a.quiet);
    a.runtime.check_conflicts();
    const RunningCommand running("bench");
    // The plot's file is made before anything is measured: a path it cannot go to costs no benchmark.
    std::optional<AtomicFile> plot;
    if (!a.plot.empty())
        plot.emplace(a.plot, a.synthetic.empty() ? std::vector<InputFile>{{a.checkpoint, "the checkpoint"}}
                                                 : std::vector<InputFile>{},
                     "--plot");
    const Checkpoint ck = load_model(a);
    fault_from_environment(ck.config(), "bench");  // bench injects nothing, but a malformed value is still an error
    Device device = Device::open(a.runtime.platform, a.runtime.device, a.profile);
    BenchOptions o;
    o.prompt = a.prompt;
    o.tokens = a.tokens;
    o.context = a.context;
    o.runs = a.runs;
    o.device = device_options(a.runtime, device.info());
    if (a.probe_mib > 0) {  // left out (0): the default size
        // The probes' buffers are whole MiB: a fraction would be rounded away without a word.
        if (a.probe_mib != std::floor(a.probe_mib))
            throw usage_error("--probe-mib: " + number_text("%g", a.probe_mib) +
                              " is not a whole number of MiB; give one, e.g. --probe-mib 256");
        const double probe_bytes = a.probe_mib * static_cast<double>(kMiB);
        if (probe_bytes > static_cast<double>(device.info().max_alloc_bytes))
            throw usage_error("--probe-mib: " + number_text("%g", a.probe_mib) + " MiB is more than " +
                              device.info().name + " allows in one buffer (" +
                              std::to_string(device.info().max_alloc_bytes / kMiB) + " MiB)");
        o.probe_bytes = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(probe_bytes));  // 0 would mean the default
    }
    o.profile = a.profile;
    const BenchResult result = run_benchmark(device, ck, a.synthetic.empty() ? a.checkpoint : "synthetic:" + a.synthetic, o);
    const std::string report = a.json ? format_bench_json(result) : format_bench_text(result);
    std::fputs(report.c_str(), out);
    flush_or_throw(out);
    // After the report: a plot that fails to write does not take the measurement with it.
    if (plot) write_roofline_svg(*plot, roofline_from_bench(result));
    return 0;
}

}  // namespace llamacl
