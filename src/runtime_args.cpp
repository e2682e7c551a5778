#include "llamacl/runtime_args.hpp"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/help_format.hpp"

namespace llamacl {

namespace {

// The exact work shape's bits are run.c's: a faster, less exact product is not its to take.
Error exact_shape_refuses_fast() {
    return usage_error("--prompt-precision fast: the exact work shape keeps run.c's bits and has no tensor cores; "
                       "drop one of --prompt-precision fast and --work-shape exact");
}

}  // namespace

void RuntimeArgs::check_conflicts() const {
    if (prompt_precision == "fast" && (work_shape == "exact" || work_shape.starts_with("exact:")))
        throw exact_shape_refuses_fast();
}

bool RuntimeArgs::shapes_the_runtime() const {
    return layers_per_offload != 0 || !work_shape.empty() || max_device_memory_mib != 0 || no_host_mirror ||
           no_tensor_cores || prompt_precision == "fast" || !finalize.empty() ||
           (!schedule.empty() && schedule != "auto");
}

void add_runtime_options(CLI::App& cmd, RuntimeArgs& a) {
    const OptionGroup group(cmd, kWhereItRuns);
    // An empty selector would match every device: it is a mistake (an unset shell variable), not a choice.
    cmd.add_option("--platform", a.platform, "OpenCL platform: index or case-insensitive name substring")
        ->check(not_empty("an index or a name substring from llama-cl devices"));
    cmd.add_option("--device", a.device,
                   "OpenCL device: index, platform.device, or case-insensitive name substring (default: the first "
                   "GPU, else the first device)")
        ->check(not_empty("an index, platform.device or a name substring from llama-cl devices"));
    cmd.add_option("--layers-per-offload", a.layers_per_offload,
                   "layers staged on the device at once (1..n_layers); default: as many as fit, all when the "
                   "model fits (resident)")
        ->transform(decimal_integer(1, std::numeric_limits<int>::max(),
                                    "a whole number from 1 to " + std::to_string(std::numeric_limits<int>::max()),
                                    "POSITIVE INTEGER"));
    cmd.add_option("--finalize", a.finalize,
                   "where the final RMSNorm and classifier run: device (read back logits; the default) or cpu (read "
                   "back the final hidden state)")
        ->check(CLI::IsMember({"cpu", "device"}));
    cmd.add_option("--work-shape", a.work_shape,
                   "kernel work-group shape: cpu, gpu, exact (run.c's bits), ROWxLOCAL work-items, or exact:ROWxLOCAL "
                   "(that shape in run.c's order) (default: chosen for the device)")
        ->check(not_empty("cpu, gpu, exact, ROWxLOCAL or exact:ROWxLOCAL (e.g. 32x256), or leave the flag out"));
    cmd.add_option("--schedule", a.schedule,
                   "how a token runs: token (the whole forward pass as one kernel launch: GPUs, and CPUs with the "
                   "cpu or exact work shape; resident weights), "
                   "per-op (one kernel launch per step) or auto (token where possible; the default)")
        ->check(CLI::IsMember({"auto", "per-op", "token"}));
    cmd.add_option("--max-device-memory", a.max_device_memory_mib,
                   "plan as if the device had only this many MiB (rehearse a smaller device)")
        ->transform(positive_number());
    cmd.add_flag("--no-host-mirror", a.no_host_mirror,
                 "when layers stream, refill one pinned buffer per chunk instead of keeping a pinned copy of "
                 "the streamed layers in host memory (kept by default when they take at most half of the "
                 "available memory)");
    cmd.add_flag("--no-tensor-cores", a.no_tensor_cores,
                 "run the prompt's matrix products on the portable kernels even where the GPU has tensor cores "
                 "(NVIDIA, compute capability 8.0 on: TF32 mma.sync with split operands, about fp32's accuracy; for "
                 "Q8_0 in groups of a multiple of 32, int8 mma.sync, runq.c's sums exactly)");
    cmd.add_option("--prompt-precision", a.prompt_precision,
                   "the prompt's matrix products of f32 and f16 weights on tensor cores: exact (split TF32 operands, "
                   "about fp32's accuracy; the default) or fast (one TF32 product each, as llama.cpp's cuBLAS). "
                   "Unchanged by it: quantized weights, decoding, and prompts without tensor cores (the portable "
                   "kernels, CPU shapes); refused with --work-shape exact")
        ->check(CLI::IsMember({"exact", "fast"}));
}

void add_weights_option(CLI::App& cmd, std::string& weights) {
    const OptionGroup group(cmd, kWhereItRuns);
    std::vector<std::string> names;
    for (ElementType type : kElementTypes) names.emplace_back(element_name(type));
    cmd.add_option("--weights", weights,
                   "the weights' format: f32, f16, q8_0 (int8 in groups: runq.c's for a llama2.c file, ggml's for a "
                   "GGUF file) or q4_0 (ggml's 4-bit blocks of 32); f32 and f16 weights are converted at load "
                   "(default: the file's own format)")
        ->check(CLI::IsMember(names));
}

std::optional<ElementType> weights_format(const std::string& weights) { return parse_element_type(weights); }

void add_vocab_mismatch_flag(CLI::App& cmd, bool& allow) {
    const OptionGroup group(cmd, kModelGroup);
    cmd.add_flag("--allow-vocab-mismatch", allow,
                 "run with a -z tokenizer that has more entries than the model's vocabulary, as run.c does (its "
                 "extra ids are never sampled, its pieces mean another model's tokens); refused by default");
}

namespace {

// Blanks around a number are not part of it: "-n ' 8'" and "-n '8 '" both read 8 (run.c's atoi and atof
// skip the leading ones); anything else after the digits is a mistake.
void trim_blanks(std::string& text) {
    const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
    while (!text.empty() && blank(static_cast<unsigned char>(text.back()))) text.pop_back();
    std::size_t first = 0;
    while (first < text.size() && blank(static_cast<unsigned char>(text[first]))) first++;
    text.erase(0, first);
}

// The whole text as a number (strtod's forms: 0.8, 1e-3, inf, nan), or nullopt.
std::optional<double> whole_number(const std::string& text) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') return std::nullopt;
    return v;
}

}  // namespace

CLI::Validator number(const std::function<std::string(const std::string&)>& complaint) {
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            trim_blanks(text);
            return whole_number(text) ? std::string() : complaint(text);
        },
        "NUMBER");
}

CLI::Validator positive_number() {
    return CLI::Validator(
        [](std::string& text) -> std::string {
            trim_blanks(text);
            const std::optional<double> v = whole_number(text);
            if (!v || !std::isfinite(*v) || *v <= 0) return "must be positive (got " + text + ")";
            return {};
        },
        "POSITIVE");
}

CLI::Validator not_empty(const std::string& expected) {
    return CLI::Validator(
        [=](std::string& text) -> std::string { return text.empty() ? "is empty; give " + expected : ""; },
        "TEXT");
}

CLI::Validator decimal_int() {
    return decimal_integer(std::numeric_limits<int>::min(), std::numeric_limits<int>::max(),
                           "a decimal integer from -2147483648 to 2147483647", "INTEGER");
}

CLI::Validator decimal_integer(long long lo, long long hi, const std::string& range_text, const std::string& name) {
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            trim_blanks(text);
            char* end = nullptr;
            errno = 0;
            const long long v = std::strtoll(text.c_str(), &end, 10);
            if (end == text.c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi)
                return "must be " + range_text + " (got " + text + ")";
            text = std::to_string(v);
            return {};
        },
        name);
}

DeviceOptions device_options(const RuntimeArgs& a, const DeviceInfo& device) {
    DeviceOptions options;
    options.layers_per_offload = a.layers_per_offload;
    options.finalize = a.finalize == "cpu" ? Finalize::cpu : Finalize::device;
    if (!a.work_shape.empty()) options.shape = parse_launch_shape(a.work_shape, device);
    // Past 2^63 bytes a limit no longer limits anything (and would not convert); below one byte it must
    // still be a limit, not the 0 that means "none".
    if (a.max_device_memory_mib > 0)
        options.memory_limit =
            static_cast<std::uint64_t>(std::clamp(a.max_device_memory_mib * 1024.0 * 1024.0, 1.0, 0x1p63));
    options.host_mirror = !a.no_host_mirror;
    options.tensor_cores = a.no_tensor_cores ? TensorCores::never : TensorCores::where_present;
    options.prompt_precision = a.prompt_precision == "fast" ? PromptPrecision::fast : PromptPrecision::exact;
    if (options.prompt_precision == PromptPrecision::fast && options.shape && options.shape->exact())
        throw exact_shape_refuses_fast();
    options.schedule = a.schedule == "per-op" ? Schedule::per_op
                       : a.schedule == "token" ? Schedule::token
                                               : Schedule::automatic;
    return options;
}

}  // namespace llamacl
