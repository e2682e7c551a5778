#include "llamacl/check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "llamacl/bandwidth_probes.hpp"
#include "llamacl/bench.hpp"
#include "llamacl/capacity_plan.hpp"
#include "llamacl/compare.hpp"
#include "llamacl/device_forward.hpp"
#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/generate.hpp"
#include "llamacl/kernel_checks.hpp"
#include "llamacl/number_text.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/roofline_svg.hpp"
#include "llamacl/sampler.hpp"

namespace llamacl {

namespace {

// The ladder's sizes: enough positions to cross a few of attention's lengths, few enough for a CPU.
constexpr int kForwardPositions = 8, kGeneratePositions = 24, kPromptTokens = 4;
// A prefill of a CPU shape's batch and a few more positions (two batches there, more than a GEMM tile on
// GPU shapes), within the context: the reference runs each position too, so not a GPU shape's batch.
constexpr int kPrefillPositions = kCpuPrefillBatch + 6;
// The most positions any rung runs: the runtime, its plan and the references hold these, not the whole
// context, whose KV cache a header alone can make larger than the machine.
constexpr int kLadderPositions = std::max({kForwardPositions, kGeneratePositions, kPrefillPositions});
DeviceOptions ladder_runtime(DeviceOptions options) {
    options.positions = kLadderPositions;
    return options;
}
constexpr int kPlotPrompt = 32, kPlotTokens = 4;  // check --plot's benchmark: bench --prompt 32 -n 4
// Buffer round trips and the copy probe stop here on a CPU (PoCL), where memory is the host's own and a
// larger copy only costs time.
constexpr std::uint64_t kCpuBufferCap = 64 * kMiB, kGpuBufferCap = 1024 * kMiB;
constexpr int kProbeReps = 3;

// The ladder's stages, in order: a device stage is one rung, a format stage one rung per weight format.
enum class Scope { device, format };
struct Stage {
    const char* name;
    Scope scope;
};
constexpr Stage kStages[] = {{"device", Scope::device},       {"buffers", Scope::device},  {"kernels", Scope::format},
                             {"layer", Scope::format},        {"forward", Scope::format},  {"prefill", Scope::format},
                             {"generate", Scope::format},     {"grid-barrier", Scope::format},
                             {"bandwidth", Scope::device}};

// One rung: a stage, in a format where the stage has one.
struct RungRef {
    std::size_t stage;
    std::optional<ElementType> format;
    std::string name() const {
        return std::string(kStages[stage].name) + (format ? std::string(":") + element_name(*format) : "");
    }
};

// The rungs in climbing order. A run of format stages is climbed whole in one format before the next, so
// that each format's runtime is released before the next one's is loaded.
std::vector<RungRef> ladder(std::span<const ElementType> formats) {
    std::vector<RungRef> rungs;
    for (std::size_t i = 0; i < std::size(kStages);) {
        if (kStages[i].scope == Scope::device) {
            rungs.push_back({i++, std::nullopt});
            continue;
        }
        std::size_t end = i;
        while (end < std::size(kStages) && kStages[end].scope == Scope::format) ++end;
        for (ElementType format : formats)
            for (std::size_t stage = i; stage < end; ++stage) rungs.push_back({stage, format});
        i = end;
    }
    return rungs;
}

// The report's figures: three significant digits.
std::string g_text(double v) { return number_text("%.3g", v); }

std::string mib_text(std::uint64_t bytes) {
    return bytes >= kMiB ? g_text(static_cast<double>(bytes) / kMiB) + " MiB" : std::to_string(bytes) + " B";
}

std::string yes_no(bool v) { return v ? "yes" : "no"; }

bool has_extension(const std::string& extensions, const std::string& name) {
    return (" " + extensions + " ").find(" " + name + " ") != std::string::npos;
}

// A rung's outcome as its body reports it: failures as strings, figures where it compares numbers.
struct Outcome {
    std::string failure;  // empty: passed
    std::string detail;
    std::optional<double> max_abs_err, tolerance;
    bool skipped = false;
    std::string hint;  // instead of the stage's own
};

class Ladder {
public:
    Ladder(Device& device, const Checkpoint& ck, const Tokenizer& tokenizer, const CheckOptions& o)
        : device_(device), base_(ck), tokenizer_(tokenizer), o_(o), runtime_(ladder_runtime(o.device)),
          plan_(first_plan()) {}

    CheckReport climb(const RungObserver& observer);

private:
    Outcome device_facts();
    Outcome buffers();
    Outcome kernels();
    Outcome layer();
    Outcome forward();
    Outcome prefill();
    Outcome generation();
    Outcome grid_barrier();
    Outcome bandwidth();
    std::string hint(const RungRef& rung) const;
    // The launch shape the runtime takes for weights of `format` here (--work-shape's, where given).
    LaunchShape shape(ElementType format) const;
    std::string describe_shapes() const;  // the first format's shape, and any other format's that differs
    CapacityPlan first_plan() const;

    // The format the rungs now climb: the checkpoint converted to it, the previous format's runtime gone.
    void enter(std::optional<ElementType> format);
    const Checkpoint& checkpoint() const { return *ck_; }
    const Config& config() const { return ck_->config(); }
    // The rungs' tolerance against the reference: --compare-cpu's default for the weights.
    double tolerance() const { return default_tolerance(config().weight_format); }
    DeviceForward& model();
    std::vector<int> tokens(int count) const;

    Device& device_;
    const Checkpoint& base_;
    const Tokenizer& tokenizer_;
    const CheckOptions& o_;
    DeviceOptions runtime_;  // o_.device within kLadderPositions
    // The runtime's plan for the first format. A model it refuses (too large for the device, or too many
    // layers) is an error of the command, not a rung's failure: no port is at fault.
    CapacityPlan plan_;
    std::optional<ElementType> format_;
    std::optional<Checkpoint> ck_;             // base_ in format_
    std::unique_ptr<KernelHarness> harness_;  // the device rung's (f32), then the kernel rung's format's
    std::unique_ptr<DeviceForward> model_;     // the runtime, shared by the format's rungs that run the model
    int token_groups_ = 0;                     // model_'s token kernel's work-groups when it started (0: none)
    std::optional<Roofline> roofline_;         // the bandwidth rung's benchmark, with o_.plot
};

CheckReport Ladder::climb(const RungObserver& observer) {
    // In kStages' order.
    const std::function<Outcome()> bodies[] = {
        [this] { return device_facts(); }, [this] { return buffers(); },      [this] { return kernels(); },
        [this] { return layer(); },        [this] { return forward(); },      [this] { return prefill(); },
        [this] { return generation(); },   [this] { return grid_barrier(); }, [this] { return bandwidth(); }};
    static_assert(std::size(bodies) == std::size(kStages), "a body for each stage");
    CheckReport report;
    report.device = device_.info();
    report.model = base_.path();
    report.shape = describe_shapes();
    const auto start = std::chrono::steady_clock::now();
    bool failed = false;
    for (const RungRef& ref : ladder(o_.formats)) {
        Rung rung;
        rung.name = ref.name();
        rung.format = ref.format;
        if (failed) {
            report.rungs.push_back(rung);
            if (observer) observer(report);
            continue;
        }
        const auto t0 = std::chrono::steady_clock::now();
        Outcome out;
        try {
            enter(ref.format);
            out = bodies[ref.stage]();
        } catch (const cl::Error& e) {
            out.failure = describe(e);
        } catch (const std::bad_alloc&) {
            throw;  // the host's shortage, not the device's fault: an error of the command (exit 1)
        } catch (const std::exception& e) {
            out.failure = e.what();
        }
        rung.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (out.failure.empty() && o_.injected_rung == rung.name)
            out.failure = "injected fault (LLAMACL_INJECT_FAULT=rung:" + rung.name + ")";
        rung.max_abs_err = out.max_abs_err;
        rung.tolerance = out.tolerance;
        rung.status = !out.failure.empty() ? RungStatus::fail : out.skipped ? RungStatus::skip : RungStatus::pass;
        rung.detail = out.failure.empty() ? out.detail : out.failure;
        if (rung.status == RungStatus::fail) {
            rung.hint = out.hint.empty() ? hint(ref) : out.hint;
            failed = true;
        }
        report.rungs.push_back(rung);
        if (observer) observer(report);
    }
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    report.roofline = std::move(roofline_);
    return report;
}

LaunchShape Ladder::shape(ElementType format) const {
    return launch_shape_for(o_.device.shape, device_.info(), WeightFormat{format});
}

std::string Ladder::describe_shapes() const {
    const LaunchShape first = shape(o_.formats.front());
    std::string text = first.describe();
    for (ElementType f : o_.formats)
        if (shape(f) != first) text += "; " + std::string(element_name(f)) + ": " + shape(f).describe();
    return text;
}

std::string Ladder::hint(const RungRef& rung) const {
    const std::string stage = kStages[rung.stage].name;
    std::string h;
    if (stage == "device")
        h = "`llama-cl devices` lists the devices; pick another with --platform/--device (a kernel build log names "
            "what the compiler refused)";
    else if (stage == "buffers")
        h = "the driver loses data in large buffers: try --max-device-memory MIB (smaller allocations) or another "
            "device";
    else if (stage == "kernels")
        h = shape(*rung.format).exact()
                ? "even the exact shape (run.c's loops) disagrees: the device's compiler or arithmetic is at fault; "
                  "try another device"
                : "the kernels of this shape (" + shape(*rung.format).describe() +
                      ") disagree with the CPU: try `llama-cl check --work-shape exact`, then other shapes "
                      "(--work-shape cpu, gpu or ROWxLOCAL)";
    else if (stage == "layer" || stage == "forward")
        h = "`llama-cl generate CHECKPOINT -z TOKENIZER --compare-cpu -v` prints every boundary; try --schedule "
            "per-op, then --work-shape exact";
    else if (stage == "prefill")
        h = "the prompt's batches (kernels/prefill.cl) disagree with the reference: `llama-cl generate CHECKPOINT -z "
            "TOKENIZER -i PROMPT --compare-cpu` names the first position; try --work-shape exact";
    else if (stage == "generate")
        h = "the device decodes other tokens: try --schedule per-op, then --work-shape exact";
    else if (stage == "grid-barrier")
        h = "the token kernel's work-groups do not all run at once on this device: use --schedule per-op";
    else
        h = "the probes timed nothing: check that the device's queue supports profiling";
    // A later format failing where the first passed leaves that one to run.
    if (rung.format && *rung.format != o_.formats.front())
        h += "; the " + std::string(element_name(o_.formats.front())) + " rungs passed: --weights " +
             element_name(o_.formats.front()) + " runs on them";
    return h;
}

void Ladder::enter(std::optional<ElementType> format) {
    if (!format || format == format_) return;
    model_.reset();
    format_ = format;
    ck_ = with_weights(base_, format);
}

DeviceForward& Ladder::model() {
    if (!model_) {
        model_ = std::make_unique<DeviceForward>(device_, checkpoint(), runtime_);
        token_groups_ = model_->token_groups();
    }
    return *model_;
}

// A fixed, seeded token sequence starting at BOS.
std::vector<int> Ladder::tokens(int count) const {
    std::mt19937 rng(7);
    std::vector<int> t(static_cast<std::size_t>(count), 1);
    for (std::size_t i = 1; i < t.size(); ++i)
        t[i] = static_cast<int>(rng() % static_cast<std::uint32_t>(base_.config().vocab_size));
    return t;
}

Outcome Ladder::device_facts() {
    const cl::Device& d = device_.device();
    const std::string c_version = d.getInfo<CL_DEVICE_OPENCL_C_VERSION>();
    const std::string extensions = d.getInfo<CL_DEVICE_EXTENSIONS>();
    // Building the shape's kernels is what the device must manage first; the kernel rungs run them.
    harness_ = std::make_unique<KernelHarness>(device_, shape(o_.formats.front()));
    const KernelSet& k = harness_->kernels;
    k.own();  // (built on first use: here, so that a build the device refuses fails this rung)
    const bool nvidia = has_extension(extensions, "cl_nv_device_attribute_query");
    const auto& f = o_.formats;
    const bool f16 = std::find(f.begin(), f.end(), ElementType::f16) != f.end();
    std::string formats;
    for (ElementType type : f) formats += (formats.empty() ? "" : ", ") + std::string(element_name(type));
    Outcome out;
    const char* fences = k.device_fences()    ? "used"
                         : k.shape().gpu_family() ? "not used"
                                                  : "the token kernel's only (CPU shapes)";
    out.detail = c_version + "; weights: " + formats + "; device fences: " + fences +
                 "; fp16 (vload_half, core): " + (f16 ? "used" : "not used") + ", cl_khr_fp16 " +
                 yes_no(has_extension(extensions, "cl_khr_fp16")) + "; fp64: " +
                 (k.glibc_expf() ? "used (glibc's expf)" : "not used") + ", cl_khr_fp64 " +
                 yes_no(has_extension(extensions, "cl_khr_fp64")) + "; inline PTX: " +
                 (k.warp_shuffles() ? "used (warp shuffles)" : nvidia ? "found, not used" : "not found") +
                 "; correctly rounded divide/sqrt: " +
                 yes_no((d.getInfo<CL_DEVICE_SINGLE_FP_CONFIG>() & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0);
    return out;
}

CapacityPlan Ladder::first_plan() const {
    const Config& c = base_.config();
    return plan_capacity(c, device_.info(), runtime_.finalize, runtime_.layers_per_offload, runtime_.memory_limit,
                         prefill_batch_for(shape(o_.formats.front()), c), runtime_.positions);
}

Outcome Ladder::buffers() {
    // The largest buffer the plan allocates: one layer's weights, the KV cache or the classifier, in the
    // checkpoint's own format (the first climbed, and the largest: fp32 where it converts).
    const CapacityPlan& plan = plan_;
    const std::uint64_t largest = std::max({plan.layer_bytes, plan.kv_cache_bytes, plan.constant_bytes});
    const std::uint64_t cap = std::min({largest, device_.info().max_alloc_bytes,
                                        device_.info().is_cpu ? kCpuBufferCap : kGpuBufferCap});
    // Odd sizes (not whole pages or vectors), eightfold from one float up to the cap, and the cap.
    std::vector<std::uint64_t> sizes;
    for (std::uint64_t s = 4; s < cap; s = s * 8 + 12) sizes.push_back(s);
    sizes.push_back(cap / 4 * 4);
    Outcome out;
    out.max_abs_err = 0;
    out.tolerance = 0;
    std::mt19937 rng(11);
    for (std::uint64_t bytes : sizes) {
        std::vector<std::uint32_t> sent(bytes / 4), back(bytes / 4);
        for (auto& v : sent) v = static_cast<std::uint32_t>(rng());
        cl::Buffer buffer = device_.allocate(bytes, "round-trip buffer");
        device_.queue().enqueueWriteBuffer(buffer, CL_TRUE, 0, bytes, sent.data());
        device_.queue().enqueueReadBuffer(buffer, CL_TRUE, 0, bytes, back.data());
        const auto diff = std::mismatch(sent.begin(), sent.end(), back.begin());
        if (diff.first != sent.end()) {
            out.failure = mib_text(bytes) + " buffer: word " + std::to_string(diff.first - sent.begin()) +
                          " came back different";
            out.max_abs_err = INFINITY;
            return out;
        }
    }
    out.detail = std::to_string(sizes.size()) + " sizes, 4 B to " + mib_text(sizes.back()) + " (the plan's largest buffer: " +
                 mib_text(largest) + ")";
    return out;
}

Outcome Ladder::kernels() {
    Outcome out;
    const LaunchShape here = shape(*format_);
    try {
        device_weights(checkpoint(), device_.info(), here);
    } catch (const Error& e) {
        out.failure = e.what();
        out.hint = "the message names the remedy; check the fp32 original, which converts to every format the "
                   "kernels read";
        return out;
    }
    // The model's own format (its Q8_0 rule included) and norm.
    if (harness_->weights != config().weight_format || harness_->kernels.shape() != here ||
        harness_->norm_eps != config().norm_eps)
        harness_ = std::make_unique<KernelHarness>(device_, here, config().weight_format, true,
                                                   TensorCores::where_present, "", config().norm_eps);
    double worst_ratio = -1;
    int checks = 0;
    for (const KernelCheckResult& r : check_all_kernels(*harness_)) {
        ++checks;
        const double ratio = r.tolerance > 0 ? r.max_abs_err / r.tolerance : r.max_abs_err > 0 ? INFINITY : 0;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            out.max_abs_err = r.max_abs_err;
            out.tolerance = r.tolerance;
        }
        if (!r.passed() && out.failure.empty())
            out.failure = r.name + ": " + r.failures.front() +
                          (r.failures.size() > 1 ? " (and " + std::to_string(r.failures.size() - 1) + " more)" : "");
    }
    const KernelHarness& h = *harness_;
    out.detail = std::to_string(checks) + " kernel checks, " + h.weights.describe() + " weights, " +
                 (h.exact ? h.exact_exp ? "bit-identical" : "bit-identical but for exp()"
                          : h.exact_products ? "products bit-identical" : "within tolerance") +
                 " on " + here.describe();
    return out;
}

Outcome Ladder::layer() {
    Outcome out;
    // The first rung to need the runtime starts it: options it cannot honour here fail it, with their own remedy.
    try {
        model();
    } catch (const Error& e) {
        out.failure = std::string("the runtime did not start: ") + e.what();
        out.hint = "change or drop the option the message names (--schedule, --work-shape, --layers-per-offload, "
                   "--max-device-memory, --finalize)";
        return out;
    }
    DeviceForward& device = model();
    if (const auto fault = fault_from_environment(config())) device.inject_fault(*fault);
    LockstepCompare compare(device, checkpoint(), tolerance());
    compare.forward(tokens(1)[0], 0);
    out.max_abs_err = 0;
    out.tolerance = tolerance();
    for (const BoundaryStats& s : compare.first_token_table()) {
        if (s.layer != 0) continue;
        out.max_abs_err = std::max(*out.max_abs_err, s.max_abs);
        if (s.diverged && out.failure.empty())
            out.failure = std::string("layer 0, ") + op_name(s.op) + ": max abs err " + g_text(s.max_abs) + " at index " +
                          std::to_string(s.worst) + " (tolerance " + g_text(tolerance()) + " x max(|reference|, 1))";
    }
    out.detail = "layer 0 at position 0, every boundary (tolerance relative to max(|reference|, 1))";
    return out;
}

// A LockstepCompare's result as a rung's: its figures, and its summary line when it diverged.
Outcome compared(const LockstepCompare& compare, const std::string& detail) {
    Outcome out;
    out.max_abs_err = compare.max_abs_error();
    out.tolerance = compare.tolerance();
    if (compare.first_divergence()) out.failure = compare.summary().substr(std::strlen("compare-cpu: "));
    // (A tensor passes with an error above the tolerance where its values are larger than 1.)
    out.detail = detail + " (tolerance relative to max(|reference|, 1))";
    return out;
}

Outcome Ladder::forward() {
    LockstepCompare compare(model(), checkpoint(), tolerance());
    const int positions = std::min(kForwardPositions, config().seq_len);
    const std::vector<int> t = tokens(positions);
    for (int pos = 0; pos < positions; ++pos) compare.forward(t[static_cast<std::size_t>(pos)], pos);
    return compared(compare, std::to_string(positions) + " positions, " + std::to_string(config().n_layers) +
                                 " layers, every boundary");
}

Outcome Ladder::prefill() {
    DeviceForward& device = model();
    LockstepCompare compare(device, checkpoint(), tolerance());
    const int positions = std::min(kPrefillPositions, config().seq_len);
    compare.prefill(tokens(positions), 0);
    const int batch = device.prefill_batch(), batches = (positions + batch - 1) / batch;
    return compared(compare, std::to_string(positions) + " positions in " + std::to_string(batches) + " batch" +
                                 (batches == 1 ? "" : "es") + " of up to " + std::to_string(batch) +
                                 ", every position's logits and the K/V cache");
}

// The bytes generate() prints for `prompt`, greedy, with `model`.
std::string greedy_text(Forward& model, const Tokenizer& tokenizer, const Config& c, const std::vector<int>& prompt,
                        int steps) {
    char* text = nullptr;
    std::size_t size = 0;
    std::FILE* out = open_memstream(&text, &size);
    if (!out) throw Error("check: cannot open a memory stream for the generated text");
    try {
        Sampler sampler(c.vocab_size, 0.0f, 0.9f, 1);
        generate(model, tokenizer, sampler, prompt, steps, out);
    } catch (...) {
        std::fclose(out);
        std::free(text);
        throw;
    }
    std::fclose(out);
    std::string result(text, size);
    std::free(text);
    return result;
}

Outcome Ladder::generation() {
    // A prompt, prefilled as `generate -i` does, then greedy decoding.
    const int steps = std::min(kGeneratePositions, config().seq_len);
    const std::vector<int> prompt = tokens(std::min(kPromptTokens, steps));
    ReferenceForward reference(checkpoint(), kLadderPositions);
    const std::string want = greedy_text(reference, tokenizer_, config(), prompt, steps);
    const std::string got = greedy_text(model(), tokenizer_, config(), prompt, steps);
    Outcome out;
    if (got != want) {
        const auto at = std::mismatch(want.begin(), want.end(), got.begin(), got.end()).first - want.begin();
        out.failure = "greedy text differs from the reference's at byte " + std::to_string(at) + " of " +
                      std::to_string(want.size());
    }
    out.detail = std::to_string(steps) + " positions greedy after a prompt of " + std::to_string(prompt.size()) +
                 ", " + std::to_string(want.size()) + " bytes identical to the reference's";
    return out;
}

Outcome Ladder::grid_barrier() {
    DeviceForward& device = model();
    Outcome out;
    const int groups = token_groups_;
    if (groups == 0) {
        out.skipped = true;
        out.detail = "no token kernel here: " + device.per_op_reason();
        return out;
    }
    // The token kernel gives up (and the runtime narrows it or leaves it) when a work-group waits at a
    // barrier for one that never ran; its launches, the generate rung's included, must keep every
    // work-group and match the reference.
    const auto all_ran = [&] { return device.token_schedule() && device.token_groups() == groups; };
    if (!all_ran()) {
        out.failure = "the token kernel's " + std::to_string(groups) + " work-groups did not all run at once (in the "
                      "generate rung)";
        return out;
    }
    ReferenceForward reference(checkpoint(), kLadderPositions);
    const int positions = std::min(kForwardPositions, config().seq_len);
    const std::vector<int> t = tokens(positions);
    out.max_abs_err = 0;
    out.tolerance = tolerance();
    for (int pos = 0; pos < positions; ++pos) {
        const int token = t[static_cast<std::size_t>(pos)];
        const std::vector<float> want = [&] {
            const std::span<float> l = reference.forward(token, pos);
            return std::vector<float>(l.begin(), l.end());
        }();
        const BoundaryStats s = compare_tensor(device.forward(token, pos), want, tolerance());
        out.max_abs_err = std::max(*out.max_abs_err, s.max_abs);
        if (!all_ran()) {
            out.failure = "the token kernel's " + std::to_string(groups) + " work-groups did not all run at once (position " +
                          std::to_string(pos) + ")";
            return out;
        }
        if (s.diverged) {
            out.failure = "the token kernel's logits at position " + std::to_string(pos) + ": max abs err " +
                          g_text(s.max_abs) + " at index " + std::to_string(s.worst);
            return out;
        }
    }
    out.detail = std::to_string(groups) + " work-groups together over " + std::to_string(positions) + " positions";
    return out;
}

Outcome Ladder::bandwidth() {
    model_.reset();  // the probes and --plot's benchmark have the device to themselves
    const std::uint64_t bytes = probe_size(std::min(default_probe_bytes(device_.info()),
                                                    device_.info().is_cpu ? kCpuBufferCap : kGpuBufferCap));
    Outcome out;
    double gbs = 0, gflops = 0;
    if (!o_.plot) {
        gbs = measure_copy_gbs(device_, bytes, kProbeReps);
        gflops = measure_fma_gflops(device_, kProbeReps);
    } else {
        // The roofline's points are bench --profile's, with a prompt for the FMA roof and the prefill's point:
        // a short benchmark on a runtime of its own, in the first format.
        const Checkpoint ck = with_weights(base_, o_.formats.front());
        BenchOptions b;
        b.prompt = std::min(kPlotPrompt, ck.config().seq_len);
        b.tokens = std::min(kPlotTokens, ck.config().seq_len);
        b.runs = 1;
        b.device = o_.device;
        b.probe_bytes = bytes;
        b.probe_reps = kProbeReps;
        b.profile = true;
        const BenchResult result = run_benchmark(device_, ck, ck.path(), b);
        gbs = result.device_copy_gbs;
        gflops = result.device_fma_gflops;
        roofline_ = roofline_from_bench(result);
    }
    if (!(gbs > 0 && std::isfinite(gbs))) out.failure = "the copy probe measured " + g_text(gbs) + " GB/s";
    else if (!(gflops > 0 && std::isfinite(gflops))) out.failure = "the FMA probe measured " + g_text(gflops) + " GFLOP/s";
    out.detail = "copy " + g_text(gbs) + " GB/s over " + mib_text(bytes) + ", FMA " + g_text(gflops) + " GFLOP/s" +
                 (o_.plot ? "; measured by --plot's benchmark" : "");
    return out;
}

}  // namespace

const char* rung_status_name(RungStatus status) {
    switch (status) {
        case RungStatus::pass: return "pass";
        case RungStatus::fail: return "fail";
        case RungStatus::skip: return "skip";
        case RungStatus::not_run: break;
    }
    return "not run";
}

std::vector<ElementType> check_formats(const Checkpoint& checkpoint) {
    const ElementType own = checkpoint.weight_format().type;
    if (own != ElementType::f32) return {own};
    // Each one the model converts to in groups the device reads (runq.c's default groups of a shape whose
    // dims allow no multiple of 4 serve the CPU reference alone).
    std::vector<ElementType> formats;
    for (ElementType type : kDeviceElementTypes) {
        const std::optional<WeightFormat> converted = converted_format(checkpoint.config(), type);
        if (converted && converted->device_reads_groups()) formats.push_back(type);
    }
    return formats;
}

std::vector<std::string> rung_names(std::span<const ElementType> formats) {
    std::vector<std::string> names;
    for (const RungRef& r : ladder(formats)) names.push_back(r.name());
    return names;
}

const Rung* CheckReport::first_failure() const {
    for (const Rung& r : rungs)
        if (r.status == RungStatus::fail) return &r;
    return nullptr;
}

CheckReport run_check(Device& device, const Checkpoint& checkpoint, const Tokenizer& tokenizer,
                      const CheckOptions& options, const RungObserver& observer) {
    return Ladder(device, checkpoint, tokenizer, options).climb(observer);
}

std::string format_check_header(const CheckReport& report) {
    return "check: " + report.device.name + " (" + report.device.platform_name + "), " + report.model +
           ", shape: " + report.shape + "\n";
}

std::string format_rung_line(const Rung& r) {
    char line[256];
    const std::string err = r.max_abs_err ? g_text(*r.max_abs_err) : "-";
    const std::string tol = r.tolerance ? g_text(*r.tolerance) : "-";
    std::snprintf(line, sizeof line, "  %-17s  %-7s  max abs err %-9s  tolerance %-9s  %7.3f s  ", r.name.c_str(),
                  rung_status_name(r.status), err.c_str(), tol.c_str(), r.seconds);
    return line + r.detail + "\n";
}

std::string format_check_summary(const CheckReport& report) {
    char total[64];
    std::snprintf(total, sizeof total, " in %.1f s", report.seconds);
    if (const Rung* f = report.first_failure())
        return "check: FAILED at " + f->name + ": " + f->detail + total + "\ncheck: next: " + f->hint + "\n";
    int passed = 0, skipped = 0;
    std::string skipped_names;
    for (const Rung& r : report.rungs) {
        passed += r.status == RungStatus::pass;
        if (r.status != RungStatus::skip) continue;
        ++skipped;
        skipped_names += (skipped_names.empty() ? "" : ", ") + r.name;
    }
    return "check: passed: " + std::to_string(passed) + " of " + std::to_string(report.rungs.size()) + " rungs" +
           (skipped ? ", " + std::to_string(skipped) + " skipped (" + skipped_names + ")" : "") + total + "\n";
}

std::string format_check_text(const CheckReport& report) {
    std::string out = format_check_header(report);
    for (const Rung& r : report.rungs) out += format_rung_line(r);
    return out + format_check_summary(report);
}

std::string format_check_json(const CheckReport& report) {
    using nlohmann::json;
    const auto number = [](const std::optional<double>& v) {
        return v && std::isfinite(*v) ? json(*v) : json(nullptr);
    };
    json rungs = json::array();
    for (const Rung& r : report.rungs)
        rungs.push_back({{"name", r.name}, {"format", r.format ? json(element_name(*r.format)) : json(nullptr)},
                         {"status", rung_status_name(r.status)}, {"max_abs_err", number(r.max_abs_err)},
                         {"tolerance", number(r.tolerance)}, {"seconds", r.seconds}, {"detail", r.detail},
                         {"hint", r.hint}});
    const Rung* f = report.first_failure();
    const json j = {{"device", report.device.name},
                    {"platform", report.device.platform_name},
                    {"model", report.model},
                    {"shape", report.shape},
                    {"passed", f == nullptr},
                    {"first_failure", f ? json(f->name) : json(nullptr)},
                    {"seconds", report.seconds},
                    {"rungs", rungs}};
    return j.dump() + "\n";
}

}  // namespace llamacl
