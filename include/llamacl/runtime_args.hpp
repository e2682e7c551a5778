#pragma once
// The command-line options that choose the OpenCL device and shape the runtime on it, shared by
// `generate` and `bench` so both spell, check and apply them the same way.
#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "llamacl/device_options.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

struct RuntimeArgs {
    std::string platform, device;     // selectors, see Device::open
    int layers_per_offload = 0;       // 0: as many as fit
    std::string finalize;             // empty: device
    std::string work_shape;           // empty: chosen for the device
    double max_device_memory_mib = 0; // 0: the device's own memory
    bool no_host_mirror = false;      // streaming: never keep a pinned copy of the layers
    std::string schedule;             // empty: auto
    bool no_tensor_cores = false;     // prefill's GEMMs on the portable path even where tensor cores are
    std::string prompt_precision;     // empty: exact

    // Whether any option that only means something on an OpenCL device was given, and their names.
    bool shapes_the_runtime() const;
    // Throws the usage error for flags that contradict each other whatever the device: --prompt-precision
    // fast with --work-shape exact or exact:ROWxLOCAL (device_options refuses the rest of the exact shapes,
    // 1xLOCAL, once the device is known). Commands call it before they open a device.
    void check_conflicts() const;
    static constexpr const char* device_only_options =
        "--layers-per-offload, --work-shape, --max-device-memory, --no-host-mirror, --no-tensor-cores, "
        "--prompt-precision fast, --finalize and --schedule";
};

void add_runtime_options(CLI::App& cmd, RuntimeArgs& args);
// --weights, an element type's name (kElementTypes), which every backend honours (the CPU reference computes
// on the converted weights).
void add_weights_option(CLI::App& cmd, std::string& weights);
std::optional<ElementType> weights_format(const std::string& weights);  // nullopt: the file's own
// --allow-vocab-mismatch, for commands that take -z: a tokenizer with more entries than the model's
// vocabulary runs, as run.c runs it, instead of being refused as another model's.
void add_vocab_mismatch_flag(CLI::App& cmd, bool& allow);
// A transform for options that take a number: blanks around it are dropped, and anything strtod does not
// read whole is refused with complaint(text).
CLI::Validator number(const std::function<std::string(const std::string&)>& complaint);
// A transform for options that take a size: a finite number above zero (0, nan and inf are mistakes, not
// ways to say "default"; leaving the option out is).
CLI::Validator positive_number();
// A transform for integer options (blanks around them dropped): decimal (010 is ten; CLI11 alone reads it as octal 8) within [lo, hi],
// else "must be RANGE_TEXT (got X)". The text is rewritten in decimal for CLI11's own conversion.
CLI::Validator decimal_integer(long long lo, long long hi, const std::string& range_text, const std::string& name);
// decimal_integer over the whole int range, for counts whose range is checked where they are used.
CLI::Validator decimal_int();
// A check for text options: "is empty; give EXPECTED" for an empty value.
CLI::Validator not_empty(const std::string& expected);
DeviceOptions device_options(const RuntimeArgs& args, const DeviceInfo& device);

}  // namespace llamacl
