#include "llamacl/backend.hpp"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "llamacl/error.hpp"
#include "llamacl/launch_shape.hpp"
#include "llamacl/model_config.hpp"
#include "llamacl/number_text.hpp"
#include "llamacl/progress.hpp"

namespace llamacl {

namespace {

using Clock = std::chrono::steady_clock;

// Whether --backend auto may choose the CPU reference: no flag asks for a device.
bool auto_may_choose_reference(const BackendFlags& a) {
    return a.choice == "auto" && a.runtime.platform.empty() && a.runtime.device.empty() && !a.compare_cpu &&
           !a.runtime.shapes_the_runtime();
}

// --backend auto runs a run that reads under 512 MiB of weights in all (a position's weights times the
// run's positions) on the CPU reference without starting OpenCL. The reference reads that in about the
// time an OpenCL platform takes just to start (PoCL loads LLVM: 35 ms on a 2-core machine that reads 10-20
// GB/s; a GPU driver takes longer), so no device could finish first. Says so in `notice`.
bool run_is_shorter_than_opencl_start(const BackendFlags& a, const Checkpoint& ck, long long run_positions,
                                      std::string& notice) {
    constexpr double kShortRunBytes = double(std::uint64_t{512} << 20);
    const double bytes = static_cast<double>(ModelSize(ck.config()).weight_bytes()) * static_cast<double>(run_positions);
    if (!auto_may_choose_reference(a) || bytes >= kShortRunBytes) return false;
    char line[192];
    std::snprintf(line, sizeof line,
                  "--backend auto: the CPU reference, without starting OpenCL: this run reads %.2f MiB of weights, "
                  "less than an OpenCL start costs (--backend opencl to use a device)",
                  bytes / (1 << 20));
    notice = line;
    return true;
}

// Opens the OpenCL device for --backend opencl/auto, for a run of `run_positions` forward passes; nullopt
// when auto finds no OpenCL at all (said in `fallback`), or chooses the CPU reference for a run too short to
// start OpenCL for (said in `choice`).
std::optional<Device> open_device(const BackendFlags& a, const Checkpoint& ck, long long run_positions,
                                  std::string& choice, std::string& fallback) {
    if (a.choice == "cpu" || run_is_shorter_than_opencl_start(a, ck, run_positions, choice)) return std::nullopt;
    try {
        return Device::open(a.runtime.platform, a.runtime.device);
    } catch (const Error& e) {
        // auto falls back to the reference only when there is no OpenCL at all; a selector that
        // matches nothing is still the user's mistake.
        if (a.choice == "auto" && a.runtime.platform.empty() && a.runtime.device.empty()) {
            // Neither can the CPU reference honour flags that ask for a device.
            if (a.compare_cpu)
                throw Error(std::string("--compare-cpu: no OpenCL device to compare with the CPU reference (") +
                            e.what() + "); drop --compare-cpu to run on the CPU reference alone");
            if (a.runtime.shapes_the_runtime())
                throw Error(std::string(e.what()) + "; " + RuntimeArgs::device_only_options +
                            " need one: drop them to run on the CPU reference");
            fallback = std::string("no OpenCL device (") + e.what() + "); using the CPU reference";
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

const Clock::time_point process_start = Clock::now();  // at static initialization, before main

double seconds_between(Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double>(to - from).count();
}

// PoCL generates each kernel's code at its first launch, and a kernel program is built when a launch first
// needs it: untimed passes at position 0 through the kernels the run launches (a prompt's prefill of several
// positions, a token, greedy decoding's; the run restarts at 0 and rewrites what they wrote) keep that out of
// the printed rates, as run.c's timing skips its first pass. Only with resident weights, where a pass costs
// a token's time, not a stream of every layer.
void first_launches(DeviceForward& model, const DeviceInfo& device, const BackendRun& run) {
    const ProgressLine progress("preparing the kernels' first launch on " + device.name +
                                " (the driver caches them for the next run)");
    const int bos = 1;
    const std::array<int, 2> two{bos, bos};  // (one position runs as a token: forward's kernels)
    if (run.prompt && run.positions >= 2) model.prefill(two, 0);
    model.forward(bos, 0);
    GreedyDecoder* greedy = run.greedy ? model.greedy_decoder() : nullptr;
    if (!greedy) return;
    greedy->start(0, std::span(&bos, 1), 1);
    try {
        greedy->next(0);
    } catch (const NonFiniteLogits&) {
        // (The run reports it at its own position, or --compare-cpu where the model first diverged.)
    }
}

}  // namespace

void check_backend_flags(const BackendFlags& a) {
    a.runtime.check_conflicts();
    if (a.tolerance && !(*a.tolerance >= 0 && std::isfinite(*a.tolerance)))
        throw usage_error("--tolerance: must be a finite number >= 0 (got " + number_text("%g", *a.tolerance) + ")");
    if (a.choice == "cpu") {
        if (a.compare_cpu)
            throw usage_error("--compare-cpu compares an OpenCL device with the CPU reference; it needs --backend opencl or auto");
        if (a.runtime.shapes_the_runtime())
            throw usage_error(std::string(RuntimeArgs::device_only_options) +
                              " apply to an OpenCL device, not to --backend cpu");
        if (!a.runtime.platform.empty() || !a.runtime.device.empty())
            throw usage_error("--platform and --device apply to an OpenCL device, not to --backend cpu");
    }
}

Backend::Backend(const BackendFlags& flags, const Checkpoint& ck, const std::optional<Fault>& fault, const BackendRun& run)
    : flags_(flags), run_(run), opened_(Clock::now()),
      device_(open_device(flags, ck, run.forward_passes, auto_choice_, fallback_)) {
    std::unique_ptr<ReferenceForward> reference;
    if (device_ && auto_may_choose_reference(flags) && device_->info().is_cpu) {
        const Clock::time_point device_open = Clock::now();
        reference = choose_by_rates(ck, device_open);
    } else if (device_) {
        load_device(ck, Clock::now());
    }
    if (!device_) {
        run_on_reference(ck, fault, std::move(reference));
        return;
    }
    if (fault) {
        on_device_->inject_fault(*fault);
        llamacl::report(std::string("LLAMACL_INJECT_FAULT=") + std::getenv("LLAMACL_INJECT_FAULT") +
               ": corrupting that device result (self-test of --compare-cpu)");
    }
    if (flags_.compare_cpu)
        compare_ = std::make_unique<LockstepCompare>(*on_device_, ck,
                                                    flags_.tolerance.value_or(default_tolerance(ck.weight_format())));
    report_choice();
    if (flags_.verbose) {
        std::fprintf(stderr, "device: %s (%s)\n%s%s\nkernels: %s; %s weights\nschedule: %s\n",
                     device_->info().name.c_str(), device_->info().platform_name.c_str(),
                     on_device_->plan().describe().c_str(),
                     on_device_->host_mirror() ? "; streamed from a pinned mirror of the layers" : "",
                     on_device_->shape().describe().c_str(), ck.config().weight_format.describe().c_str(),
                     (flags_.compare_cpu ? describe_schedule(0, "--compare-cpu compares each step with the reference")
                                    : describe_schedule(on_device_->token_groups(), on_device_->per_op_reason()))
                         .c_str());
        std::fprintf(stderr, "%s\n", startup_.c_str());
    }
    before_ = on_device_->counters();
}

// The model on the device opened, its first launches made; -v's startup line in `startup`.
void Backend::load_device(const Checkpoint& ck, Clock::time_point device_open) {
    DeviceOptions options = device_options(flags_.runtime, device_->info());
    options.positions = run_.positions;
    auto forward = std::make_unique<DeviceForward>(*device_, ck, options);
    on_device_ = forward.get();
    model_ = std::move(forward);
    const Clock::time_point loaded = Clock::now();
    const Device::Builds built_at_load = device_->builds();
    if (on_device_->plan().resident()) first_launches(*on_device_, device_->info(), run_);
    startup_ = describe_startup(device_open, loaded, built_at_load, Clock::now());
}

// --backend auto where the device is a CPU: the device's model loaded and the rates it and the
// reference run `work` at (measured where the cache has none), and the device dropped where the
// reference is the faster or the kernels cannot read the weights; returns the reference that was
// measured, if any.
std::unique_ptr<ReferenceForward> Backend::choose_by_rates(const Checkpoint& ck, Clock::time_point device_open) {
    try {
        device_weights(ck, device_->info(), choose_launch_shape(device_->info(), ck.weight_format()));
    } catch (const Error& e) {
        auto_choice_ = "--backend auto: the CPU reference, as " + device_->info().name + "'s kernels cannot run this model (" +
                      e.what() + ")";
        device_.reset();
        return nullptr;
    }
    const RateCache cache = RateCache::of_user();
    const std::string key = rate_key(device_->info(), ck.config(), run_.work);
    std::optional<PathRates> rates = cache.find(key);
    std::unique_ptr<ReferenceForward> reference;
    std::string source = "measured earlier, kept in " + cache.file().string();
    if (!rates) {
        const ProgressLine progress("--backend auto: measuring " + device_->info().name +
                                    " and the CPU reference on this model (once: the rates are kept)");
        load_device(ck, device_open);
        reference = std::make_unique<ReferenceForward>(ck, run_.positions);
        rates = measure_rates(*model_, *reference, run_.work, run_.positions);
        source = cache.store(key, *rates) ? "measured now, kept in " + cache.file().string()
                 : cache.file().empty()   ? std::string("measured now; not kept: neither XDG_CACHE_HOME nor HOME is set")
                                          : "measured now; not kept: " + cache.file().string() + " could not be written";
    }
    const std::string unit = run_.work == Work::decode ? " tok/s" : " positions/s";
    const std::string device_rate = number_text("%.0f", rates->device) + unit,
                      reference_rate = number_text("%.0f", rates->reference) + unit;
    if (rates->device_faster()) {
        if (!model_) load_device(ck, device_open);
        auto_choice_ = "--backend auto: OpenCL on " + device_->info().name + ", " + device_rate +
                      " against the CPU reference's " + reference_rate + " on this model (" + source +
                      "; --backend cpu for the reference)";
        return nullptr;
    }
    auto_choice_ = "--backend auto: the CPU reference, " + reference_rate + " against " + device_rate + " on " +
                  device_->info().name + " for this model (" + source + "; --backend opencl to use it)";
    model_.reset();
    on_device_ = nullptr;
    device_.reset();
    return reference;
}

// The run on the CPU reference (`measured`, where auto measured one).
void Backend::run_on_reference(const Checkpoint& ck, const std::optional<Fault>& fault,
                               std::unique_ptr<ReferenceForward> measured) {
    // The self-test corrupts a device's result: on the reference it would inject nothing, silently.
    if (fault)
        throw usage_error(std::string("LLAMACL_INJECT_FAULT=") + std::getenv("LLAMACL_INJECT_FAULT") +
                          ": corrupts a device result, and this run is on the CPU reference; run it with "
                          "--backend opencl (--compare-cpu names the boundary), or unset it");
    model_ = measured ? std::move(measured) : std::make_unique<ReferenceForward>(ck, run_.positions);
    report_choice();
    if (flags_.verbose) std::fprintf(stderr, "backend: CPU reference\n");
}

// The fallback to the reference unless -q; auto's choice with -v.
void Backend::report_choice() const {
    if (!fallback_.empty() && !flags_.quiet) llamacl::report(fallback_);
    if (!auto_choice_.empty() && flags_.verbose) llamacl::report(auto_choice_);
}

// -v: where the time before the first position went, from the process's start. Programs build while
// the model loads and, for shapes built on first use, in the first launches: each phase less its own.
std::string Backend::describe_startup(Clock::time_point device_open, Clock::time_point loaded,
                             Device::Builds built_at_load, Clock::time_point now) const {
    const Device::Builds builds = device_->builds();
    char line[320];
    std::snprintf(line, sizeof line,
                  "startup: %.3f s: checkpoint and tokenizer %.3f s, OpenCL platforms and device %.3f s, kernel "
                  "builds %.3f s (%d program%s), buffers and weights %.3f s, first launches %.3f s",
                  seconds_between(process_start, now), seconds_between(process_start, opened_),
                  seconds_between(opened_, device_open), builds.seconds, builds.programs,
                  builds.programs == 1 ? "" : "s", seconds_between(device_open, loaded) - built_at_load.seconds,
                  seconds_between(loaded, now) - (builds.seconds - built_at_load.seconds));
    return line;
}

Forward& Backend::driver() { return compare_ ? static_cast<Forward&>(*compare_) : *model_; }

int Backend::report(int positions) const {
    if (on_device_ && flags_.verbose) print_per_token(on_device_->counters() - before_, positions);
    if (!compare_) return 0;
    if (flags_.verbose) {
        std::fprintf(stderr, "compare-cpu: token 0\n%s", format_boundary_table(compare_->first_token_table()).c_str());
        if (compare_->first_divergence() && compare_->first_divergence()->pos != 0)
            std::fprintf(stderr, "compare-cpu: token %d\n%s", compare_->first_divergence()->pos,
                         format_boundary_table(compare_->divergent_token_table()).c_str());
    }
    std::fprintf(stderr, "%s\n", compare_->summary().c_str());
    return compare_->first_divergence() ? 3 : 0;
}

int Backend::ended_non_finite(const NonFiniteLogits& e) const {
    if (!compare_ || !compare_->first_divergence()) throw;
    return report(e.pos() + 1);
}


}  // namespace llamacl
