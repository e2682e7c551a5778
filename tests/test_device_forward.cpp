// The OpenCL runtime end to end: run.c's reference outputs for every layers-per-offload and both
// finalize modes, every boundary against the CPU reference on awkward shapes, and the runtime's own
// counters (host waits, bytes moved) per token.
#include <gtest/gtest.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "llamacl/device_forward.hpp"
#include "llamacl/export.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/position_rows.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/synthetic.hpp"
#include "llamacl/token_kernel.hpp"
#include "models.hpp"
#include "reference_cases.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

int layers_of(const std::filesystem::path& model) { return Checkpoint::open(model.string()).config().n_layers; }

Device open_test_device() { return Device::open("", ""); }  // PoCL in CI

// The CPU device (PoCL in CI), if there is one.
std::optional<Device> open_cpu_device() {
    const std::vector<DeviceInfo> devices = list_devices();
    const auto cpu = std::find_if(devices.begin(), devices.end(), [](const DeviceInfo& d) { return d.is_cpu; });
    if (cpu == devices.end()) return std::nullopt;
    return Device::open("", std::to_string(cpu->platform_index) + "." + std::to_string(cpu->device_index));
}

// Max |device - reference| over a tensor, relative to the reference's largest magnitude (at least 1).
double relative_error(std::span<const float> device, std::span<const float> reference) {
    double err = 0, scale = 1;
    for (std::size_t i = 0; i < reference.size(); ++i) {
        err = std::max(err, static_cast<double>(std::fabs(device[i] - reference[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(reference[i])));
    }
    return err / scale;
}

// Greedy decoding's tokens from position 0 for `steps` positions, the prompt's forced: through the host's
// argmax of forward()'s logits, or the device's own decoding.
std::vector<int> host_tokens(DeviceForward& model, const std::vector<int>& prompt, int steps) {
    std::vector<int> tokens = {prompt[0]};
    for (int pos = 0; pos < steps; ++pos) {
        const int next = sample_argmax(model.forward(tokens.back(), pos));
        tokens.push_back(pos + 1 < static_cast<int>(prompt.size()) ? prompt[pos + 1] : next);
    }
    return tokens;
}
std::vector<int> device_tokens(GreedyDecoder& greedy, const std::vector<int>& prompt, int steps) {
    std::vector<int> tokens = {prompt[0]};
    greedy.start(0, prompt, steps);
    for (int pos = 0; pos < steps; ++pos) tokens.push_back(greedy.next(pos));
    return tokens;
}

// The token schedule's executor for `ck`, or nullptr where the device cannot run it (`why` says why).
std::unique_ptr<DeviceForward> open_token_schedule(Device& device, const Checkpoint& ck, std::string& why) {
    DeviceOptions options;
    options.schedule = Schedule::token;
    try {
        return std::make_unique<DeviceForward>(device, ck, options);
    } catch (const Error& e) {
        why = e.what();
        return nullptr;
    }
}

}  // namespace

TEST(DeviceForwardCases, EveryReferenceCaseForEveryLayersPerOffloadAndFinalize) {
    LLAMACL_REQUIRE_SHARED(shared);
    for (const ReferenceCase& c : load_cases(shared)) {
        const int layers = layers_of(shared / "models" / c.model);
        const std::string expected = read_file(shared / "reference" / c.expected);
        for (int k = 1; k <= layers; ++k) {
            for (const char* finalize : {"device", "cpu"}) {
                const std::string flags = "--backend opencl --layers-per-offload " + std::to_string(k) +
                                          " --finalize=" + finalize;
                const CommandResult r = run_llama_cl(generate_args(shared, c, flags));
                EXPECT_EQ(r.exit_code, 0) << c.id << " " << flags << ": " << r.err;
                EXPECT_EQ(r.out, expected) << "case " << c.id << " with " << flags;
            }
        }
    }
}

TEST(DeviceForwardCases, EveryWorkShapeReproducesTheReferenceCases) {
    // The GPU kernels (cooperative rows, tree reductions, parallel attention) run on PoCL too, so CI
    // checks the code the GPU runs; "exact" is run.c's own loop order (1x8: as GPUs run float weights;
    // exact:4x16 the gpu family's rows with run.c's order of sums, as they run quantized ones).
    LLAMACL_REQUIRE_SHARED(shared);
    for (const ReferenceCase& c : load_cases(shared)) {
        for (const char* shape : {"gpu", "4x16", "exact", "1x8", "exact:4x16"}) {
            const std::string flags = std::string("--backend opencl --layers-per-offload 1 --work-shape ") + shape;
            const CommandResult r = run_llama_cl(generate_args(shared, c, flags));
            EXPECT_EQ(r.exit_code, 0) << c.id << ": " << r.err;
            EXPECT_EQ(r.out, read_file(shared / "reference" / c.expected)) << "case " << c.id << " with " << flags;
        }
    }
}

TEST(DeviceForwardCases, F16WeightsPrintTheReferencesTextOnEveryShapeKAndFinalize) {
    // The device's halves widen exactly as the reference's do: the reference on --weights f16 is the text.
    LLAMACL_REQUIRE_SHARED(shared);
    for (const ReferenceCase& c : load_cases(shared)) {
        const int layers = layers_of(shared / "models" / c.model);
        const CommandResult reference = run_llama_cl(generate_args(shared, c, "--backend cpu --weights f16"));
        ASSERT_EQ(reference.exit_code, 0) << reference.err;
        for (const char* shape : {"cpu", "gpu", "exact"}) {
            for (const int k : {1, layers}) {
                for (const char* finalize : {"device", "cpu"}) {
                    const std::string flags = std::string("--backend opencl --weights f16 --work-shape ") + shape +
                                              " --layers-per-offload " + std::to_string(k) + " --finalize=" + finalize;
                    const CommandResult r = run_llama_cl(generate_args(shared, c, flags));
                    EXPECT_EQ(r.exit_code, 0) << c.id << " " << flags << ": " << r.err;
                    EXPECT_EQ(r.out, reference.out) << "case " << c.id << " with " << flags;
                }
            }
        }
    }
}

// Version-2 files print runq.c's text (cases-q80.tsv) on the exact shape (CPUs' default for Q8_0:
// choose_launch_shape) for every layers-per-offload, both finalize modes, and streamed layers without the
// pinned mirror; the prompts run through the Q8_0 prefill. (The other shapes' last-bit differences can
// round an activation to another integer: they are not held to the text.)
TEST(DeviceForwardCases, Q80CasesPrintRunqsTextForEveryLayersPerOffloadAndFinalize) {
    LLAMACL_REQUIRE_SHARED(shared);
    for (const ReferenceCase& c : load_cases(shared, "cases-q80.tsv")) {
        const int layers = layers_of(shared / "models" / c.model);
        const std::string expected = read_file(shared / "reference" / c.expected);
        std::vector<std::string> runs = {"--layers-per-offload 1 --no-host-mirror"};
        for (int k = 1; k <= layers; ++k)
            for (const char* finalize : {"device", "cpu"})
                runs.push_back("--layers-per-offload " + std::to_string(k) + " --finalize=" + finalize);
        for (const std::string& run : runs) {
            const std::string flags = "--backend opencl --work-shape exact " + run;
            const CommandResult r = run_llama_cl(generate_args(shared, c, flags));
            EXPECT_EQ(r.exit_code, 0) << c.id << " " << flags << ": " << r.err;
            EXPECT_EQ(r.out, expected) << "case " << c.id << " with " << flags;
        }
    }
}

// --weights q8_0 on the fp32 files: the reference on the same conversion (runq.c's path) is the text, on
// the exact shape.
TEST(DeviceForwardCases, Q80ConvertedWeightsPrintTheReferencesText) {
    LLAMACL_REQUIRE_SHARED(shared);
    for (const ReferenceCase& c : load_cases(shared)) {
        const int layers = layers_of(shared / "models" / c.model);
        const CommandResult reference = run_llama_cl(generate_args(shared, c, "--backend cpu --weights q8_0"));
        ASSERT_EQ(reference.exit_code, 0) << reference.err;
        for (const int k : {1, layers}) {
            for (const char* finalize : {"device", "cpu"}) {
                const std::string flags = "--backend opencl --work-shape exact --weights q8_0 --layers-per-offload " +
                                          std::to_string(k) + " --finalize=" + finalize;
                const CommandResult r = run_llama_cl(generate_args(shared, c, flags));
                EXPECT_EQ(r.exit_code, 0) << c.id << " " << flags << ": " << r.err;
                EXPECT_EQ(r.out, reference.out) << "case " << c.id << " with " << flags;
            }
        }
    }
}

// Every boundary of the device forward pass against the CPU reference's, over several tokens, for
// awkward shapes (dim 36 and hidden 100: not multiples of the work-group; MHA, GQA and MQA), with fp32
// weights and converted to Q8_0 (groups of 4).
struct BoundaryCase {
    const char* name;
    int kv_heads;
    const char* shape;
    int layers_per_offload;
    Finalize finalize;
    std::optional<ElementType> weights = std::nullopt;  // --weights
};

class DeviceBoundaries : public ::testing::TestWithParam<BoundaryCase> {};

TEST_P(DeviceBoundaries, MatchTheReferenceWithinTolerance) {
    const BoundaryCase& p = GetParam();
    TempDir dir;
    const Config c{36, 100, 3, 6, p.kv_heads, 300, 24, p.kv_heads != 2};
    const Checkpoint ck = with_weights(Checkpoint::open(write_model(dir, c, 0, 11).string()), p.weights);
    Device device = open_test_device();
    DeviceOptions options;
    options.layers_per_offload = p.layers_per_offload;
    options.finalize = p.finalize;
    options.shape = parse_launch_shape(p.shape, device.info());
    DeviceForward dev(device, ck, options);
    ReferenceForward ref(ck);

    // Exact shape: run.c's loops in run.c's order; only exp() may differ (OpenCL allows 3 ulp).
    // Vectorized and GPU shapes: reassociated sums.
    const bool exact = std::string(p.shape) == "exact";
    double tolerance = exact ? 1e-5 : 1e-4;
    if (p.weights == ElementType::q8_0) {
        // The exact shape's arithmetic is runq.c's, its exp glibc's where the device has doubles: the same
        // bits. Elsewhere a last-bit difference can round an activation to the next integer of its group,
        // a step of 1/127 of the group's largest value, in every product that reads it (the kernels' CPU
        // twins, test_kernels.cpp, check their sums tightly on the same quantized input).
        tolerance = exact && device.info().fp64 ? 0.0 : 0.05;
    }
    const int tokens[] = {1, 17, 250, 3, 3, 99, 42, 7, 120, 5};
    for (int pos = 0; pos < 10; ++pos) {
        std::vector<std::vector<float>> expected;
        ref.forward(tokens[pos], pos, [&](int, Op, std::span<const float> v) { expected.emplace_back(v.begin(), v.end()); });
        std::size_t i = 0;
        dev.forward(tokens[pos], pos, [&](int layer, Op op, std::span<const float> v) {
            ASSERT_LT(i, expected.size());
            ASSERT_EQ(v.size(), expected[i].size()) << op_name(op);
            EXPECT_LE(relative_error(v, expected[i]), tolerance) << "pos " << pos << " layer " << layer << " " << op_name(op);
            ++i;
        });
        EXPECT_EQ(i, expected.size()) << "the device reported a different number of boundaries";
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DeviceBoundaries,
    ::testing::Values(BoundaryCase{"MHA_exact", 6, "exact", 3, Finalize::device},
                      BoundaryCase{"MHA_cpu", 6, "cpu", 3, Finalize::device}, BoundaryCase{"GQA_cpu", 2, "cpu", 1, Finalize::cpu},
                      BoundaryCase{"MQA_cpu", 1, "cpu", 2, Finalize::device}, BoundaryCase{"MHA_gpu", 6, "gpu", 3, Finalize::device},
                      BoundaryCase{"GQA_gpu", 2, "gpu", 2, Finalize::cpu}, BoundaryCase{"MQA_gpu", 1, "gpu", 1, Finalize::device},
                      BoundaryCase{"GQA_4x16", 2, "4x16", 3, Finalize::device}, BoundaryCase{"GQA_2x2", 2, "2x2", 1, Finalize::device},
                      BoundaryCase{"GQA_exact_q8_0", 2, "exact", 1, Finalize::device, ElementType::q8_0},
                      BoundaryCase{"MHA_cpu_q8_0", 6, "cpu", 3, Finalize::cpu, ElementType::q8_0},
                      BoundaryCase{"MQA_gpu_q8_0", 1, "gpu", 2, Finalize::device, ElementType::q8_0},
                      BoundaryCase{"GQA_2x2_q8_0", 2, "2x2", 3, Finalize::cpu, ElementType::q8_0}),
    [](const auto& p) { return std::string(p.param.name); });

// A long context on a GPU shape splits each head's positions into chunks (flash-decoding) once there are
// enough of them; one query head makes that happen early on any device. Every position's attention
// output must still match the reference.
TEST(DeviceAttention, ChunkedLongContextMatchesTheReference) {
    TempDir dir;
    const Config c{128, 100, 2, 1, 1, 300, 300, true};
    const Checkpoint ck = Checkpoint::open(write_model(dir, c, 0, 5).string());
    Device device = open_test_device();
    DeviceOptions options;
    options.shape = parse_launch_shape("gpu", device.info());
    DeviceForward dev(device, ck, options);
    ReferenceForward ref(ck);
    const KernelSet probe(device, *options.shape);
    ASSERT_GT(probe.attention_chunks(c.n_heads, c.head_size(), c.seq_len), 1) << "the context must be long enough to split";
    int token = 1;
    for (int pos = 0; pos < c.seq_len; ++pos) {
        std::vector<std::vector<float>> expected;
        ref.forward(token, pos, [&](int, Op op, std::span<const float> v) {
            if (op == Op::attention) expected.emplace_back(v.begin(), v.end());
        });
        std::size_t i = 0;
        const std::span<float> logits = dev.forward(token, pos, [&](int layer, Op op, std::span<const float> v) {
            if (op != Op::attention) return;
            ASSERT_LT(i, expected.size());
            EXPECT_LT(relative_error(v, expected[i]), 1e-4) << "pos " << pos << " layer " << layer;
            ++i;
        });
        token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
}

// (layers per offload, whether streaming may use the pinned mirror)
class DeviceCounters : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DeviceCounters, WaitsAndBytesPerTokenFollowThePlan) {
    const auto [k, mirror] = GetParam();
    TempDir dir;
    const Config c = small_config();  // 3 layers
    const Checkpoint ck = Checkpoint::open(write_model(dir, c).string());
    Device device = open_test_device();
    // The per-op schedule's counts (on a GPU the resident model would otherwise run the token kernel,
    // whose counts TokenSchedule checks).
    DeviceOptions options;
    options.layers_per_offload = k;
    options.host_mirror = mirror;
    options.schedule = Schedule::per_op;
    DeviceForward dev(device, ck, options);
    DeviceOptions resident_options;
    resident_options.shape = dev.shape();
    resident_options.schedule = Schedule::per_op;
    DeviceForward resident(device, ck, resident_options);  // the same kernels on resident weights
    const int chunks = (c.n_layers + k - 1) / k;
    ASSERT_EQ(dev.plan().chunks(), chunks);
    EXPECT_EQ(dev.host_mirror(), mirror && k < c.n_layers) << "a few KB of layers always fit the mirror";
    dev.forward(1, 0);  // the first token fills the pipeline; measure steady-state tokens after it
    resident.forward(1, 0);
    for (int pos = 1; pos < 4; ++pos) {
        const RuntimeCounters before = dev.counters();
        const std::span<float> logits = dev.forward(5 + pos, pos);
        const RuntimeCounters d = dev.counters() - before;
        const std::span<float> expected = resident.forward(5 + pos, pos);
        EXPECT_EQ(std::memcmp(logits.data(), expected.data(), expected.size_bytes()), 0)
            << "streamed weights give the resident logits bit for bit";
        if (k == c.n_layers) {
            EXPECT_EQ(d.host_waits, 1u) << "resident weights: only the logits read may wait";
            EXPECT_EQ(d.weight_bytes_uploaded, 0u) << "resident weights are never uploaded again";
        } else if (mirror) {
            EXPECT_EQ(d.host_waits, 1u) << "a mirrored model is never copied again: only the logits read waits";
            EXPECT_EQ(d.weight_bytes_uploaded, ModelSize(c).layer_bytes() * c.n_layers)
                << "streaming uploads every layer once per token";
        } else {
            EXPECT_LE(d.host_waits, static_cast<std::uint64_t>(chunks + 1));
            EXPECT_EQ(d.weight_bytes_uploaded, ModelSize(c).layer_bytes() * c.n_layers)
                << "streaming uploads every layer once per token";
        }
        EXPECT_EQ(d.input_bytes_uploaded, static_cast<std::uint64_t>(c.dim) * sizeof(float));
        EXPECT_EQ(d.bytes_read, static_cast<std::uint64_t>(c.vocab_size) * sizeof(float));
        // 1 embedding write + 5 kernels per layer + the final norm on its own (CPU shapes) + 1 classifier
        // + 1 read, + 9 tensor copies per streamed layer
        const std::uint64_t streamed = k == c.n_layers ? 0 : 9ull * c.n_layers;
        const std::uint64_t final_norm = dev.shape().row_threads == 1 ? 1 : 0;
        EXPECT_EQ(d.enqueues, 1 + 5ull * c.n_layers + final_norm + 1 + 1 + streamed);
    }
}

INSTANTIATE_TEST_SUITE_P(LayersPerOffload, DeviceCounters, ::testing::Combine(::testing::Values(1, 2, 3), ::testing::Bool()));

TEST(DeviceCapacity, AutomaticKFollowsTheMemoryContract) {
    TempDir dir;
    const Config c = small_config();
    const Checkpoint ck = Checkpoint::open(write_model(dir, c).string());
    Device device = open_test_device();
    const CapacityPlan full = plan_capacity(c, device.info(), Finalize::device, 0);
    EXPECT_TRUE(full.resident());
    // Leave room for exactly two layers: usable is 90 % of the limit.
    const std::uint64_t need = full.persistent_bytes() + full.working_bytes + 2 * full.layer_bytes;
    const CapacityPlan two = plan_capacity(c, device.info(), Finalize::device, 0, need * 10 / 9 + 10);
    EXPECT_EQ(two.layers_per_offload, 2);
    EXPECT_LE(two.total_bytes(), two.usable_bytes);
    try {
        plan_capacity(c, device.info(), Finalize::device, 0, full.persistent_bytes());
        FAIL() << "a device too small for one layer must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("even one layer"), std::string::npos) << e.what();
    }
    EXPECT_THROW(plan_capacity(c, device.info(), Finalize::device, 4), Error);  // K > n_layers
    // A header's layer count past what the runtime holds buffers for, in any memory.
    Config deep = c;
    deep.n_layers = kMaxDeviceLayers;
    EXPECT_EQ(plan_capacity(deep, device.info(), Finalize::device, 1).layers_per_offload, 1);
    deep.n_layers = kMaxDeviceLayers + 1;
    try {
        plan_capacity(deep, device.info(), Finalize::device, 1);
        FAIL() << "more layers than the runtime holds must be refused";
    } catch (const Error& e) {
        EXPECT_EQ(std::string(e.what()).rfind(device.info().name + ": ", 0), 0u) << e.what();
        EXPECT_NE(std::string(e.what()).find("--backend cpu"), std::string::npos) << e.what();
    }
}

// The bytes of every working buffer, as the device reports them.
std::uint64_t allocated_bytes(const WorkingBuffers& w) {
    std::uint64_t bytes = 0;
    for (const cl::Buffer* b : {&w.x, &w.xn, &w.q, &w.xb, &w.hb, &w.att, &w.att_partial, &w.att_arrivals, &w.logits,
                                &w.tokens, &w.argmax_partial, &w.batch_x, &w.batch_xn, &w.batch_q, &w.batch_xb,
                                &w.batch_hb, &w.batch_hb_up, &w.batch_att, &w.batch_xq})
        bytes += b->getInfo<CL_MEM_SIZE>();
    return bytes;
}

TEST(DeviceCapacity, WorkingBytesAreWhatWorkingBuffersAllocate) {
    // For float weights, and for Q8_0's, whose prefill quantizes its inputs into a buffer of its own.
    for (const WeightFormat format : {WeightFormat{}, WeightFormat{ElementType::q8_0, 4}}) {
        SCOPED_TRACE(format.describe());
        Config c = small_config();
        c.seq_len = 300;  // long enough for attention to split a head into chunks
        c.weight_format = format;
        Device device = open_test_device();
        const int batch = 17;
        const CapacityPlan plan = plan_capacity(c, device.info(), Finalize::device, 0, 0, batch);
        // The plan's bounds: the most chunks any device splits a head into, argmax groups for every compute
        // unit, the scores in memory, the prefill batch's rows; plus the token kernel's chunk length per position.
        const int groups = kMinGroupsPerComputeUnit * static_cast<int>(device.info().compute_units);
        const WorkingBuffers most(device, c, max_attention_chunks(c), groups, true, true, batch);
        EXPECT_EQ(plan.working_bytes, allocated_bytes(most) + static_cast<std::uint64_t>(c.seq_len) * sizeof(cl_int));
        // What this device's kernels ask for stays within the plan's bounds.
        const KernelSet kernels(device, choose_launch_shape(device.info(), format), format);
        const WorkingBuffers built(device, c, kernels.attention_chunks(c.n_heads, c.head_size(), c.seq_len),
                                   kernels.argmax_groups(), !kernels.device_fences(),
                                   !kernels.attention_tiles_possible(c.head_size()), batch);
        EXPECT_LE(allocated_bytes(built), allocated_bytes(most));
    }
}

TEST(DeviceCapacity, VerboseReportsThePlanAndCountersThroughTheCli) {
    TempDir dir;
    const auto model = write_model(dir, small_config());
    const CommandResult r = run_llama_cl("generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                                         " -n 8 -s 1 --backend opencl --layers-per-offload 2 -v");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find("2 layers per offload, 2 chunks per token"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("per token:"), std::string::npos) << r.err;
}

// The token kernel (the whole forward pass in one launch) against the CPU reference: the
// logits of every position, on awkward shapes (dim 36 and hidden 100 or 99; MHA, GQA, MQA) and on a
// context long enough for attention to split into chunks, and with a long hidden layer, with fp32 weights
// and converted to f16 (on NVIDIA loaded two halves at a time where every row is whole pairs: not hidden
// 99's w2) and to Q8_0 (a last-bit difference may round an activation to the next integer,
// DeviceBoundaries' tolerance; its groups need a hidden layer of a multiple of 4).
TEST(TokenSchedule, LogitsMatchTheReference) {
    Device device = open_test_device();
    // The last one's hb is 1040 words, more than 4 a work-item of 256: on GPUs its Q8_0 input to w2 is
    // quantized once for every work-group (token.cl's QUANTIZE_W2_ONCE). The one before has dim 2560, 640
    // words, at least 2 a work-item, and heads of 128 in groups of 64 (16 words: a warp's butterfly): on
    // GPUs its Q8_0 input to wo is quantized by attention's work-groups (QUANTIZE_WO_INPUT), from position
    // 32 on from a head's chunks.
    const Config configs[] = {{36, 100, 3, 6, 6, 300, 24, true},
                              {36, 100, 3, 6, 2, 300, 24, false},
                              {36, 100, 3, 6, 1, 300, 24, true},
                              {128, 100, 2, 1, 1, 300, 300, true},
                              {2560, 64, 1, 20, 20, 300, 40, true},
                              {64, 4160, 2, 4, 2, 300, 12, true},
                              {36, 99, 2, 6, 3, 300, 24, false}};
    for (const std::optional<ElementType> weights :
         {std::optional<ElementType>(), std::optional(ElementType::f16), std::optional(ElementType::q8_0)}) {
        for (const Config& c : configs) {
            if (weights == ElementType::q8_0 && c.hidden_dim % 4 != 0) continue;
            TempDir dir;
            const Checkpoint ck = with_weights(Checkpoint::open(write_model(dir, c, 0, 13).string()), weights);
            SCOPED_TRACE(ck.weight_format().describe());
            std::string why;
            const std::unique_ptr<DeviceForward> dev = open_token_schedule(device, ck, why);
            if (!dev) GTEST_SKIP() << "no token kernel here: " << why;
            ASSERT_TRUE(dev->token_schedule());
            ReferenceForward ref(ck);
            const double tolerance = weights == ElementType::q8_0 ? 0.05 : 1e-4;
            int token = 1;
            for (int pos = 0; pos < c.seq_len; ++pos) {
                const std::span<float> expected = ref.forward(token, pos);
                const std::vector<float> want(expected.begin(), expected.end());
                const std::span<float> got = dev->forward(token, pos);
                ASSERT_LT(relative_error(got, want), tolerance)
                    << "dim " << c.dim << ", kv heads " << c.n_kv_heads << ", pos " << pos;
                token = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
            }
            EXPECT_EQ(dev->counters().enqueues, 3u * c.seq_len) << "embedding, the token kernel, logits: per token";
        }
    }
}

// A prompt of one position (generate without -i) runs as a token does, so a cold start compiles none of
// prefill's kernels for it; two positions take prefill's batch.
TEST(DeviceForwardPrefill, OnePositionRunsAsAToken) {
    Device device = open_test_device();
    TempDir dir;
    const Config c{36, 100, 2, 6, 2, 300, 24, true};
    const Checkpoint ck = Checkpoint::open(write_model(dir, c, 0, 13).string());
    DeviceForward dev(device, ck, DeviceOptions{});
    ReferenceForward ref(ck);
    std::vector<LaunchRecord> log;
    dev.record_launches(&log);
    const std::span<float> got = dev.prefill(std::vector<int>{1}, 0);
    const std::vector<float> one(got.begin(), got.end());
    const auto batched = [](const LaunchRecord& r) { return r.command == Command::write_embeddings; };
    EXPECT_EQ(std::count_if(log.begin(), log.end(), batched), 0);
    const std::span<float> want = ref.prefill(std::vector<int>{1}, 0);
    EXPECT_LT(relative_error(one, std::vector<float>(want.begin(), want.end())), 1e-4);
    log.clear();
    dev.prefill(std::vector<int>{1, 50}, 0);
    EXPECT_EQ(std::count_if(log.begin(), log.end(), batched), 1);
}

// Programs are built when a run first launches one of their kernels. Per op (the cpu shape, on any device):
// none for the model's load, the shape's own program for its first token, and nothing more for a prompt
// (the CPU shapes' GEMMs are in it) or greedy decoding.
TEST(DeviceForwardBuilds, PerOpRunsBuildTheShapesProgramAtTheirFirstToken) {
    Device device = open_test_device();
    TempDir dir;
    const Checkpoint ck = Checkpoint::open(write_model(dir, {36, 100, 2, 6, 2, 300, 24, true}, 0, 13).string());
    DeviceOptions options;
    options.shape = parse_launch_shape("cpu", device.info());
    options.schedule = Schedule::per_op;
    DeviceForward dev(device, ck, options);
    EXPECT_EQ(device.builds().programs, 0);
    dev.forward(1, 0);
    EXPECT_EQ(device.builds().programs, 1);
    dev.prefill(std::vector<int>{1, 50, 7}, 0);
    GreedyDecoder* greedy = dev.greedy_decoder();
    ASSERT_NE(greedy, nullptr);
    device_tokens(*greedy, {1}, 3);
    EXPECT_EQ(device.builds().programs, 1);
}

// A CPU device's token kernel: its program alone for tokens, one-position prompts and greedy decoding; the
// shape's own program only once a prompt of two positions runs prefill's kernels.
TEST(DeviceForwardBuilds, TokenKernelRunsBuildNoOtherProgram) {
    std::optional<Device> device = open_cpu_device();
    if (!device) GTEST_SKIP() << "no CPU OpenCL device";
    TempDir dir;
    const Checkpoint ck = Checkpoint::open(write_model(dir, {36, 100, 2, 6, 2, 300, 24, true}, 0, 13).string());
    DeviceForward dev(*device, ck, {});
    ASSERT_TRUE(dev.token_schedule()) << dev.per_op_reason();
    EXPECT_EQ(device->builds().programs, 1);
    dev.prefill(std::vector<int>{1}, 0);
    dev.forward(50, 1);
    GreedyDecoder* greedy = dev.greedy_decoder();
    ASSERT_NE(greedy, nullptr);
    device_tokens(*greedy, {1, 50}, 4);
    EXPECT_EQ(device->builds().programs, 1);
    dev.prefill(std::vector<int>{1, 50}, 0);
    EXPECT_EQ(device->builds().programs, 2);
}

// An OpenCL 1.2 device (the test device used as one) has no memory scopes: every shape builds as OpenCL C
// 1.2 without device fences, runs per op and batches prompts, and matches the reference.
TEST(OpenCl12Device, PerOpAndPromptPathsMatchTheReference) {
    Device device = open_test_device().as_opencl_1_2();
    TempDir dir;
    const Config c{36, 100, 2, 6, 2, 300, 24, true};
    const Checkpoint ck = Checkpoint::open(write_model(dir, c, 0, 13).string());
    const std::vector<int> prompt = {1, 50, 7, 200, 9, 33, 120, 5};
    for (const char* shape : {"gpu", "cpu", "exact"}) {
        SCOPED_TRACE(shape);
        DeviceOptions options;
        options.shape = parse_launch_shape(shape, device.info());
        DeviceForward dev(device, ck, options);
        EXPECT_FALSE(dev.token_schedule());
        if (std::string(shape) != "gpu") {  // (the CPU device's reason for the gpu shape is the shape)
            EXPECT_NE(dev.per_op_reason().find("OpenCL 2.0's memory scopes"), std::string::npos) << dev.per_op_reason();
        }
        ReferenceForward ref(ck);
        const std::span<float> expected = ref.prefill(prompt, 0);
        const std::vector<float> want(expected.begin(), expected.end());
        EXPECT_LT(relative_error(dev.prefill(prompt, 0), want), 1e-4);
        for (int pos = static_cast<int>(prompt.size()); pos < c.seq_len; ++pos) {
            const std::span<float> next = ref.forward(pos % 300, pos);
            const std::vector<float> next_want(next.begin(), next.end());
            ASSERT_LT(relative_error(dev.forward(pos % 300, pos), next_want), 1e-4) << "pos " << pos;
        }
    }
}

// A launch whose work-groups did not all run gives up instead of hanging (token.cl), and the token runs
// again: with one work-group per compute unit, and should that give up too, one command per step for good.
// Every position's logits still match the reference.
TEST(TokenSchedule, AfterGivingUpTheTokenRunsAgainWithFewerGroupsThenPerOp) {
    Device device = open_test_device();
    TempDir dir;
    const Config c{36, 100, 3, 6, 2, 300, 24, true};
    const Checkpoint ck = Checkpoint::open(write_model(dir, c, 0, 13).string());
    std::string why;
    const std::unique_ptr<DeviceForward> dev = open_token_schedule(device, ck, why);
    if (!dev) GTEST_SKIP() << "no token kernel here: " << why;
    const int groups = dev->token_groups();
    const bool two_per_unit = groups == 2 * static_cast<int>(device.info().compute_units);
    ReferenceForward ref(ck);
    int token = 1;
    for (int pos = 0; pos < c.seq_len; ++pos) {
        if (pos == 3 || pos == 9) dev->token_kernel_give_up_next(1);
        const std::span<float> expected = ref.forward(token, pos);
        const std::vector<float> want(expected.begin(), expected.end());
        ASSERT_LT(relative_error(dev->forward(token, pos), want), 1e-4) << "pos " << pos;
        if (pos == 3 && two_per_unit) {
            EXPECT_TRUE(dev->token_schedule());
            EXPECT_EQ(dev->token_groups(), groups / 2);
        }
        token = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
    }
    EXPECT_FALSE(dev->token_schedule());
    EXPECT_NE(dev->per_op_reason().find("did not all run at once"), std::string::npos) << dev->per_op_reason();
}

// A version-1 file's size does not bound its context: a tiny model may claim millions of positions
// (Reference.ALongContextTakesMemoryOnlyForThePositionsReached). The tables the device keeps per position
// (the RoPE table, the token kernel's chunk lengths) are written as a run reaches its positions, and greedy
// decoding keeps only the prompt's tokens on the host: a run of a few dozen positions holds nothing
// sized by the context. (On a CPU device its buffers are this process's memory; on a GPU only the host's
// share shows here.)
TEST(DeviceForwardMemory, ALongContextTakesHostMemoryOnlyForThePositionsReached) {
    Device device = open_test_device();
    TempDir dir;
    Config c{8, 16, 1, 2, 2, 300, 1 << 22, true};
    {
        // The same shape with a short context first, so that the kernels' builds are behind the measurement.
        Config short_context = c;
        short_context.seq_len = 16;
        const Checkpoint short_ck = Checkpoint::open(write_model(dir, short_context, 1, 7, "short.bin").string());
        DeviceForward warm(device, short_ck, {});
        warm.forward(1, 0);
    }
    const Checkpoint ck = Checkpoint::open(write_model(dir, c, 1).string());
    const std::uint64_t before = resident_bytes();
    if (before == 0) GTEST_SKIP() << "no /proc/self/statm to read resident memory from";
    DeviceForward model(device, ck, {});
    int token = 1;
    for (int pos = 0; pos < 8; ++pos) {
        const std::span<float> logits = model.forward(token, pos);
        ASSERT_TRUE(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
        token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    GreedyDecoder* greedy = model.greedy_decoder();
    ASSERT_NE(greedy, nullptr);
    const std::vector<int> prompt = {token, 5, 6};
    greedy->start(8, prompt, 40);
    for (int pos = 8; pos < 40; ++pos) EXPECT_GE(greedy->next(pos), 0) << "pos " << pos;
    EXPECT_LT(resident_bytes() - std::min(before, resident_bytes()), std::uint64_t{64} << 20);
}

// Past the tables' first block (PositionRows::kFirstRows positions), whose next block is written when a
// run reaches it, every position's logits still match the reference (the RoPE rotation and attention's
// chunks of those positions), and greedy decoding, which writes it when a batch reaches it, picks the
// tokens of the host's argmax.
TEST(DeviceForwardMemory, PositionsPastTheTablesFirstBlockMatchTheReference) {
    Device device = open_test_device();
    TempDir dir;
    const Config c{8, 16, 1, 2, 2, 300, PositionRows::kFirstRows + 40, true};
    const Checkpoint ck = Checkpoint::open(write_model(dir, c, 1).string());
    DeviceForward dev(device, ck, {});
    ReferenceForward ref(ck);
    int token = 1;
    for (int pos = 0; pos < c.seq_len; ++pos) {
        const std::span<float> expected = ref.forward(token, pos);
        const std::vector<float> want(expected.begin(), expected.end());
        ASSERT_LT(relative_error(dev.forward(token, pos), want), 1e-4) << "pos " << pos;
        token = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
    }
    DeviceForward decoding(device, ck, {});
    ASSERT_NE(decoding.greedy_decoder(), nullptr);
    EXPECT_EQ(device_tokens(*decoding.greedy_decoder(), {1}, c.seq_len), host_tokens(dev, {1}, c.seq_len));
}

// What -v and bench print for the schedule: the token kernel's launch size, or why each step is a command.
TEST(TokenSchedule, DescriptionNamesTheLaunchOrTheReason) {
    EXPECT_EQ(describe_schedule(264, ""), "token (the whole forward pass in one kernel launch of 264 work-groups)");
    EXPECT_EQ(describe_schedule(0, "--schedule per-op"), "per-op (one kernel launch per step: --schedule per-op)");
}

// On a CPU device the automatic schedule takes the token kernel (token_cpu.cl) with the shapes the device
// takes for each format (cpu for floats, exact for Q8_0): one work-group of one work-item per usable CPU.
// A shape of wider work-groups runs per op and says why, and asking for the token schedule there is a
// clear error.
TEST(TokenSchedule, CpuDevicesRunItWithTheirOwnShapes) {
    std::optional<Device> device = open_cpu_device();
    if (!device) GTEST_SKIP() << "no CPU OpenCL device";
    TempDir dir;
    const Checkpoint ck = Checkpoint::open(write_model(dir, {36, 100, 2, 6, 2, 300, 24, true}, 0, 13).string());
    for (const std::optional<ElementType> weights : {std::optional<ElementType>(), std::optional(ElementType::q8_0)}) {
        const Checkpoint model = with_weights(ck, weights);
        const DeviceForward automatic(*device, model, {});
        EXPECT_TRUE(automatic.token_schedule()) << automatic.per_op_reason();
        EXPECT_EQ(automatic.token_groups(), std::min(static_cast<int>(device->info().compute_units), usable_cpus()));
    }
    // A process that may run on one CPU (taskset) launches one work-group: two would spin at every barrier
    // through each other's time slices.
    cpu_set_t all, one;
    ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
    CPU_ZERO(&one);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
        if (CPU_ISSET(cpu, &all)) {
            CPU_SET(cpu, &one);
            break;
        }
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    const int groups = DeviceForward(*device, ck, {}).token_groups();
    ASSERT_EQ(::sched_setaffinity(0, sizeof all, &all), 0);
    EXPECT_EQ(groups, 1);
    DeviceOptions options;
    options.shape = parse_launch_shape("1x8", device->info());
    const DeviceForward wide(*device, ck, options);
    EXPECT_FALSE(wide.token_schedule());
    EXPECT_NE(wide.per_op_reason().find("on CPUs with the cpu or exact shape"), std::string::npos)
        << wide.per_op_reason();
    options.schedule = Schedule::token;
    std::string message;
    try {
        DeviceForward refused(*device, ck, options);
    } catch (const Error& e) {
        message = e.what();
    }
    EXPECT_NE(message.find("--schedule token is not possible here"), std::string::npos) << message;
    EXPECT_NE(message.find(device->info().name), std::string::npos) << message;
}

// The CPU families' token kernel runs the per-op kernels' steps (token_cpu.cl): its logits are the per-op
// schedule's bit for bit, on the cpu and exact shapes, for every weight format, over a context long enough
// for a step's rows to split unevenly between the work-groups (MHA, GQA, MQA; dim 36, hidden 100).
TEST(TokenSchedule, CpuShapesGiveThePerOpLogitsBitForBit) {
    std::optional<Device> device = open_cpu_device();
    if (!device) GTEST_SKIP() << "no CPU OpenCL device";
    const Config configs[] = {{36, 100, 3, 6, 6, 300, 24, true}, {36, 100, 3, 6, 2, 300, 24, false},
                              {36, 100, 3, 6, 1, 300, 24, true}};
    for (const std::optional<ElementType> weights :
         {std::optional<ElementType>(), std::optional(ElementType::f16), std::optional(ElementType::q8_0)}) {
        for (const char* shape : {"cpu", "exact"}) {
            for (const Config& c : configs) {
                TempDir dir;
                const Checkpoint ck = with_weights(Checkpoint::open(write_model(dir, c, 0, 13).string()), weights);
                SCOPED_TRACE(ck.weight_format().describe() + ", shape " + shape + ", kv heads " +
                             std::to_string(c.n_kv_heads));
                DeviceOptions options;
                options.shape = parse_launch_shape(shape, device->info());
                options.schedule = Schedule::token;
                DeviceForward token(*device, ck, options);
                options.schedule = Schedule::per_op;
                DeviceForward per_op(*device, ck, options);
                int next = 1;
                for (int pos = 0; pos < c.seq_len; ++pos) {
                    const std::span<float> l = per_op.forward(next, pos);
                    const std::vector<float> want(l.begin(), l.end());
                    const std::span<float> got = token.forward(next, pos);
                    ASSERT_TRUE(std::equal(got.begin(), got.end(), want.begin(), want.end())) << "pos " << pos;
                    next = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
                }
                EXPECT_TRUE(token.token_schedule());
            }
        }
    }
}

// The token kernel's local memory holds a layer's longest input in the bytes its weights' format stages:
// llama2-7b's 11008-wide w2 input takes 44 KB as floats, over a 48 KiB GPU's local memory, and 11.7 KB
// as Q8_0 values and scales, within it. A described device: no OpenCL needed.
TEST(TokenSchedule, TheStagedInputIsSizedByTheWeightsFormat) {
    DeviceInfo gpu;
    gpu.type = "GPU";
    gpu.scopes_standard = "CL3.0";
    gpu.local_mem_bytes = 48 * 1024;
    const Config c = *preset_config("llama2-7b");
    CapacityPlan plan;
    plan.n_layers = plan.layers_per_offload = c.n_layers;
    const LaunchShape shape{16, 256, 1};
    std::string why_not;
    EXPECT_TRUE(TokenKernel::wanted(gpu, shape, {ElementType::q8_0, 64}, c, plan, Finalize::device, why_not))
        << why_not;
    for (const WeightFormat f32_or_f16 : {WeightFormat{ElementType::f32, 0}, WeightFormat{ElementType::f16, 0}}) {
        why_not.clear();
        EXPECT_FALSE(TokenKernel::wanted(gpu, shape, f32_or_f16, c, plan, Finalize::device, why_not));
        EXPECT_EQ(why_not, "a layer's input does not fit in the token kernel's local memory");
    }
    // A layer of any size runs through it where it fits: llama3.2-1b's 232 MiB of f32 weights.
    const Config small = *preset_config("llama3.2-1b");
    plan.n_layers = plan.layers_per_offload = small.n_layers;
    plan.layer_bytes = 232ull << 20;
    EXPECT_TRUE(TokenKernel::wanted(gpu, shape, {ElementType::f32, 0}, small, plan, Finalize::device, why_not))
        << why_not;
    // The exact shape's ordered sums run per op.
    why_not.clear();
    EXPECT_FALSE(TokenKernel::wanted(gpu, LaunchShape{16, 256, 1, true}, {ElementType::q8_0, 64}, small, plan,
                                     Finalize::device, why_not));
    EXPECT_EQ(why_not, "the exact shape's ordered sums run as kernels of their own");
}

// Greedy decoding on the device, for fp32 weights and converted to Q8_0 (--weights).
class DeviceGreedy : public ::testing::TestWithParam<std::optional<ElementType>> {};

// Greedy decoding on the device (GreedyDecoder, kernels/greedy.cl) picks the tokens the host's argmax of
// forward()'s logits picks, the prompt's tokens forced, for every schedule and shape the device runs (per
// op and, where it runs, the token kernel; PoCL's own shapes and the GPU shape). A decoding abandoned with
// positions still in flight (a generation stopping at BOS) leaves nothing that changes the next one; an
// unshared classifier (no embedding table on the device) has no device decoding.
TEST_P(DeviceGreedy, PicksTheTokensOfTheHostsArgmax) {
    Device device = open_test_device();
    TempDir dir;
    const Config c{36, 100, 3, 6, 2, 300, 40, true};
    const Checkpoint ck = with_weights(Checkpoint::open(write_model(dir, c, 0, 21).string()), GetParam());
    const std::vector<int> prompt = {1, 5, 9, 20}, other = {1, 77};
    for (const Schedule schedule : {Schedule::automatic, Schedule::per_op}) {
        for (const char* shape : {"", "gpu"}) {
            DeviceOptions options;
            options.schedule = schedule;
            if (*shape) options.shape = parse_launch_shape(shape, device.info());
            DeviceForward model(device, ck, options);
            SCOPED_TRACE(describe_schedule(model.token_groups(), model.per_op_reason()) + ", shape " +
                         model.shape().describe());
            GreedyDecoder* greedy = model.greedy_decoder();
            ASSERT_NE(greedy, nullptr);
            const std::vector<int> expected = host_tokens(model, prompt, c.seq_len);
            EXPECT_EQ(device_tokens(*greedy, prompt, c.seq_len), expected);

            // Abandoned after two positions, the rest of its window still running; then another prompt.
            greedy->start(0, prompt, c.seq_len);
            EXPECT_EQ(greedy->next(0), prompt[1]);
            EXPECT_EQ(greedy->next(1), prompt[2]);
            const std::vector<int> got_other = device_tokens(*greedy, other, 12);
            EXPECT_EQ(got_other, host_tokens(model, other, 12));
        }
    }
    TempDir unshared_dir;
    const Checkpoint unshared =
        Checkpoint::open(write_model(unshared_dir, {36, 100, 3, 6, 2, 300, 40, false}, 0, 21).string());
    DeviceForward host_only(device, unshared, {});
    EXPECT_EQ(host_only.greedy_decoder(), nullptr);
}

// Giving up in the middle of greedy decoding (token.cl marks the token after the position it gave up at),
// with launches after it already enqueued, changes no token. The first time the token kernel runs again
// with fewer work-groups and the same arithmetic; the second, the per-op kernels take over. The second
// model's hb is long enough for GPUs to quantize its Q8_0 input to w2 once (a sixth grid barrier a layer,
// which each launch's barrier count takes). Both contexts leave launches to enqueue after position 10
// (two batches of kGreedyBatch are enqueued ahead), so that the second give-up happens.
TEST_P(DeviceGreedy, AfterGivingUpTheTokensAreTheSame) {
    Device device = open_test_device();
    for (const Config& c : {Config{36, 100, 3, 6, 2, 300, 40, true}, Config{64, 4160, 2, 4, 2, 300, 40, true}}) {
        SCOPED_TRACE("hidden_dim " + std::to_string(c.hidden_dim));
        TempDir dir;
        const Checkpoint ck = with_weights(Checkpoint::open(write_model(dir, c, 0, 21).string()), GetParam());
        std::string why;
        const std::unique_ptr<DeviceForward> model = open_token_schedule(device, ck, why);
        if (!model) GTEST_SKIP() << "no token kernel here: " << why;
        GreedyDecoder* greedy = model->greedy_decoder();
        ASSERT_NE(greedy, nullptr);
        const std::vector<int> prompt = {1, 5, 9, 20};
        const std::vector<int> expected = host_tokens(*model, prompt, c.seq_len);
        model->token_kernel_give_up_next(1);
        EXPECT_EQ(device_tokens(*greedy, prompt, c.seq_len), expected);

        std::vector<int> got = {prompt[0]};
        greedy->start(0, prompt, c.seq_len);
        for (int pos = 0; pos < c.seq_len; ++pos) {
            if (pos == 10) model->token_kernel_give_up_next(1);
            got.push_back(greedy->next(pos));
        }
        EXPECT_FALSE(model->token_schedule());
        EXPECT_EQ(got, host_tokens(*model, prompt, c.seq_len));
    }
}

INSTANTIATE_TEST_SUITE_P(Weights, DeviceGreedy, ::testing::Values(std::nullopt, ElementType::q8_0),
                         [](const auto& p) { return std::string(p.param ? element_name(*p.param) : "file"); });
