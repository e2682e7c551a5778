#pragma once
// Where generate's, chat's and perplexity's forward passes run, as their flags ask: the OpenCL device
// (with --compare-cpu, in lockstep with the CPU reference) or the CPU reference, and --backend auto's
// choice between them.
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "llamacl/backend_choice.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/compare.hpp"
#include "llamacl/device.hpp"
#include "llamacl/device_forward.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/runtime_args.hpp"

namespace llamacl {

// The flags that choose, shape and report the backend.
struct BackendFlags {
    std::string choice = "auto";  // --backend: auto, opencl or cpu
    RuntimeArgs runtime;
    bool compare_cpu = false;
    std::optional<double> tolerance;  // empty: the weights' default (default_tolerance)
    bool verbose = false;
    bool quiet = false;
};

// Usage errors (exit 2) for flags that contradict each other: --compare-cpu or a device's options with
// --backend cpu, a --tolerance that is not a finite number >= 0.
void check_backend_flags(const BackendFlags& flags);

// The run a backend is opened for.
struct BackendRun {
    int positions = 0;             // positions 0 .. positions - 1 are run
    long long forward_passes = 0;  // about how many forward passes it makes in all
    Work work = Work::decode;      // what most of them are
    bool prompt = true;            // a prompt of several positions is prefilled
    bool greedy = false;           // tokens are chosen greedily (temperature 0)
};

// The forward pass the flags ask for, for `run`. --backend auto's choice is reported (with -v) once the
// backend is ready, so that a run refused on the way has one line on stderr, the refusal. Not movable: the
// model holds on to the device.
class Backend {
public:
    Backend(const BackendFlags& flags, const Checkpoint& ck, const std::optional<Fault>& fault, const BackendRun& run);
    Backend(const Backend&) = delete;
    Backend& operator=(const Backend&) = delete;

    Forward& driver();
    // After the run of `positions` forward passes: the per-token counters (-v) and --compare-cpu's verdict
    // on stderr; the exit status.
    int report(int positions) const;
    // Called from the handler of a run that ended at a non-finite logit: under --compare-cpu a divergence
    // found on the way is the verdict (exit 3, its summary naming where it began); otherwise the error stands.
    int ended_non_finite(const NonFiniteLogits& e) const;

private:
    using Clock = std::chrono::steady_clock;
    void load_device(const Checkpoint& ck, Clock::time_point device_open);
    std::unique_ptr<ReferenceForward> choose_by_rates(const Checkpoint& ck, Clock::time_point device_open);
    void run_on_reference(const Checkpoint& ck, const std::optional<Fault>& fault,
                          std::unique_ptr<ReferenceForward> measured);
    void report_choice() const;
    std::string describe_startup(Clock::time_point device_open, Clock::time_point loaded,
                                 Device::Builds built_at_load, Clock::time_point now) const;

    BackendFlags flags_;
    BackendRun run_;
    Clock::time_point opened_;  // when the backend began to open
    // --backend auto's choice, and its fallback where there is no device; filled by `device_`'s initializer
    // (declared first).
    std::string auto_choice_, fallback_;
    std::string startup_;  // -v's account of the device's startup
    std::optional<Device> device_;
    std::unique_ptr<Forward> model_;
    DeviceForward* on_device_ = nullptr;
    std::unique_ptr<LockstepCompare> compare_;  // drives the device and the reference together
    RuntimeCounters before_;                    // the device's counters before the run
};

}  // namespace llamacl
