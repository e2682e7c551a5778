#include "llamacl/check_command.hpp"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <unistd.h>

#include "llamacl/atomic_file.hpp"
#include "llamacl/check.hpp"
#include "llamacl/compare.hpp"
#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/help_format.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/roofline_svg.hpp"
#include "llamacl/synthetic.hpp"

namespace llamacl {

namespace {

// The generated model: tiny's shape, with a context of two CPU prefill batches (so that the prefill rung
// crosses one there).
constexpr const char* kGeneratedPreset = "tiny";
constexpr int kGeneratedContext = 2 * kCpuPrefillBatch;
constexpr std::uint64_t kGeneratedSeed = 1;
constexpr int kCheckFailed = 4;

// The generated model's tokenizer, written to a temporary file for Tokenizer::load and removed again.
Tokenizer generated_tokenizer(int vocab_size) {
    const std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("llama-cl-check-" + std::to_string(::getpid()) + ".tokenizer.bin");
    write_synthetic_tokenizer(path.string(), vocab_size);
    try {
        Tokenizer t = Tokenizer::load(path.string(), vocab_size);
        std::filesystem::remove(path);
        return t;
    } catch (...) {
        std::filesystem::remove(path);
        throw;
    }
}

Checkpoint generated_checkpoint() {
    Config c = *preset_config(kGeneratedPreset);
    c.seq_len = kGeneratedContext;
    return Checkpoint::from_image(synthetic_checkpoint_image(c, 0, kGeneratedSeed),
                                  std::string("synthetic:") + kGeneratedPreset + " (seq_len " +
                                      std::to_string(kGeneratedContext) + ")");
}

// LLAMACL_INJECT_FAULT=rung:NAME, checked against the rungs' names.
std::optional<std::string> injected_rung(std::span<const ElementType> formats) {
    const std::optional<std::string> rung = rung_fault_from_environment();
    if (!rung) return rung;
    std::string names;
    for (const std::string& n : rung_names(formats)) {
        if (n == *rung) return rung;
        names += (names.empty() ? "" : ", ") + n;
    }
    throw usage_error("LLAMACL_INJECT_FAULT=rung:" + *rung + ": unknown rung; rungs: " + names);
}

}  // namespace

void add_check_command(CLI::App& app, CheckArgs& a) {
    CLI::App* cmd = app.add_subcommand(
        "check", "Bring-up ladder on an OpenCL device: buffers, each kernel, a layer, the forward pass, a prefill "
                 "and generation against the CPU reference in each weight format, the grid barrier, bandwidth; exit 4 "
                 "at the first failing rung");
    cmd->add_option("checkpoint", a.checkpoint, "llama2.c checkpoint (default: a generated model)")
        ->check(not_empty("a checkpoint file, or none for a generated model"));
    cmd->add_option("-z", a.tokenizer, "tokenizer file, with a CHECKPOINT")
        ->check(not_empty("a tokenizer file"))
        ->capture_default_str();
    add_vocab_mismatch_flag(*cmd, a.allow_vocab_mismatch);
    add_weights_option(*cmd, a.weights);
    cmd->get_option("--weights")
        ->description("climb the model's rungs in this format alone (default: each format the device's kernels "
                      "read, for an fp32 checkpoint; any other in its own)");
    add_runtime_options(*cmd, a.runtime);
    cmd->get_option("--prompt-precision")->group("");  // refused: a rung's bound is the reference's accuracy
    cmd->add_option("--plot", a.plot, "write the roofline of a short benchmark (bench --prompt 32 -n 4 --profile) as an SVG file")
        ->check(not_empty("a file name, e.g. --plot roofline.svg"));
    cmd->add_flag("--json", a.json, "print one JSON object instead of the text report");
    set_examples(*cmd, {"llama-cl check    (a generated model)", "llama-cl check stories15M.bin -z tokenizer.bin",
                        "llama-cl check --json --plot roofline.svg"});
}

int run_check_command(const CheckArgs& a, std::FILE* out) {
    const bool generated = a.checkpoint.empty();
    // Each rung holds the device to the reference's accuracy, which fast's products do not keep.
    if (a.runtime.prompt_precision == "fast")
        throw usage_error("--prompt-precision fast: check holds every rung to the reference's accuracy, which fast "
                          "trades for speed; drop it (perplexity --prompt-precision fast measures what it costs)");
    if (generated && a.tokenizer_given)
        throw usage_error("-z: check without a checkpoint generates its model and the tokenizer to go with it; give "
                          "the checkpoint that -z " + a.tokenizer + " belongs to");
    const std::optional<ElementType> weights = weights_format(a.weights);
    const Checkpoint ck = with_weights(generated ? generated_checkpoint() : Checkpoint::open(a.checkpoint), weights);
    CheckOptions o;
    // --weights F: F alone, even where the checkpoint converts to others.
    o.formats = weights ? std::vector<ElementType>{*weights} : check_formats(ck);
    o.injected_rung = injected_rung(o.formats);
    o.plot = !a.plot.empty();
    fault_from_environment(ck.config());  // a malformed boundary fault is a usage error before anything runs
    const Tokenizer tokenizer =
        generated ? generated_tokenizer(ck.config().vocab_size)
                  : Tokenizer::for_model(a.checkpoint, a.tokenizer, a.tokenizer_given, ck.config().vocab_size,
                                         a.allow_vocab_mismatch ? VocabFit::at_least : VocabFit::exact);
    // The picture's file is made before the ladder runs: a path it cannot go to is found before the first rung.
    std::optional<AtomicFile> plot;
    if (!a.plot.empty())
        plot.emplace(a.plot,
                     generated ? std::vector<InputFile>{}
                               : std::vector<InputFile>{{a.checkpoint, "the checkpoint"}, {a.tokenizer, "the tokenizer"}},
                     "--plot");
    Device device = Device::open(a.runtime.platform, a.runtime.device, !a.plot.empty());
    o.device = device_options(a.runtime, device.info());
    // The text report's lines are printed as the rungs are climbed, so that a slow rung is seen as it runs.
    const RungObserver print_rung = [out](const CheckReport& so_far) {
        if (so_far.rungs.size() == 1) std::fputs(format_check_header(so_far).c_str(), out);
        std::fputs(format_rung_line(so_far.rungs.back()).c_str(), out);
        flush_or_throw(out);
    };
    const CheckReport report = run_check(device, ck, tokenizer, o, a.json ? RungObserver{} : print_rung);
    std::fputs((a.json ? format_check_json(report) : format_check_summary(report)).c_str(), out);
    flush_or_throw(out);
    // Written after the ladder, so that a file that cannot take it fails the command, not a rung.
    if (report.roofline) write_roofline_svg(*plot, *report.roofline);
    return report.first_failure() ? kCheckFailed : 0;
}

}  // namespace llamacl
