#pragma once
// `llama-cl check`: the bring-up ladder on one device, each rung in order, stopping at the first that
// fails: device facts and buffer round trips; then for each weight format the runtime would use there,
// each kernel against its CPU twin (kernel_checks.hpp), one layer, the whole forward pass and a prefill
// against the reference (compare.hpp), greedy generation identical to the reference's and the token
// kernel's grid barrier; last the copy bandwidth and FMA throughput.
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"
#include "llamacl/device_options.hpp"
#include "llamacl/roofline_svg.hpp"
#include "llamacl/tokenizer.hpp"

namespace llamacl {

enum class RungStatus { pass, fail, skip, not_run };
const char* rung_status_name(RungStatus status);  // "pass", "fail", "skip", "not run"

struct Rung {
    std::string name;
    std::optional<ElementType> format;  // the weight format of a format stage's rung
    RungStatus status = RungStatus::not_run;
    std::optional<double> max_abs_err, tolerance;  // where the rung compares numbers
    double seconds = 0;
    std::string detail;  // what it found (pass), why it failed or was skipped
    std::string hint;    // fail: what to try next
};

// The weight formats the model's rungs run in: for an fp32 checkpoint, every one the device's kernels read
// (kDeviceElementTypes) that it converts to as --weights does (converted_format) in groups the device
// reads (WeightFormat::device_reads_groups); any other checkpoint's own.
std::vector<ElementType> check_formats(const Checkpoint& checkpoint);

// The rungs' names, in order: "device", "buffers", then "kernels:F", "layer:F", "forward:F",
// "prefill:F", "generate:F" and "grid-barrier:F" for each format F, then "bandwidth".
std::vector<std::string> rung_names(std::span<const ElementType> formats);

struct CheckOptions {
    DeviceOptions device;
    std::vector<ElementType> formats;          // check_formats(), or --weights' alone
    std::optional<std::string> injected_rung;  // LLAMACL_INJECT_FAULT=rung:NAME: that rung fails
    bool plot = false;                         // the bandwidth rung measures with a short benchmark, for a roofline
};

struct CheckReport {
    DeviceInfo device;
    std::string model, shape;
    std::vector<Rung> rungs;  // every rung, those after a failure "not run"
    double seconds = 0;
    std::optional<Roofline> roofline;  // with options.plot: the bandwidth rung's benchmark
    const Rung* first_failure() const;
};

// Called as each rung is reported, with the report so far: its last rung the one just reported.
using RungObserver = std::function<void(const CheckReport&)>;

// Climbs the ladder for `checkpoint` (fp32 where options.formats convert it) on `device` (opened with
// profiling when options.plot is set).
CheckReport run_check(Device& device, const Checkpoint& checkpoint, const Tokenizer& tokenizer,
                      const CheckOptions& options, const RungObserver& observer = {});

// The text report: a header line, one line per rung, a summary line; whole, or in its three parts so that
// the rungs can be printed as they are climbed.
std::string format_check_text(const CheckReport& report);
std::string format_check_header(const CheckReport& report);
std::string format_rung_line(const Rung& rung);
std::string format_check_summary(const CheckReport& report);
std::string format_check_json(const CheckReport& report);

}  // namespace llamacl
