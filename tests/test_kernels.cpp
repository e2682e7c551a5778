// Every OpenCL kernel of the forward pass against its CPU twin, for each launch shape the runtime can
// pick: "exact" (1 work-item per row, run.c's loops; "1x8" as GPUs run float weights; "exact:4x16" the
// gpu family with run.c's order of sums, as GPUs run quantized weights), "cpu" (1 work-item per row,
// float16 multiply-adds), "gpu" (16x256, consecutive floats per row's work-items, staged input and tree
// reductions), and "4x16", "2x2" (small groups, so row counts and head sizes straddle them); and for each
// weight format the device's kernels read (f32, f16, q8_0 by runq.c's rule and by ggml's). The checks
// themselves, their cases and their tolerances are src/kernel_checks.cpp's, which `llama-cl check` runs too.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <ostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "llamacl/device.hpp"
#include "llamacl/error.hpp"
#include "llamacl/kernel_checks.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/model_math.hpp"

using namespace llamacl;

namespace llamacl {
// The format in test names' parameters: "f16", not its bytes.
void PrintTo(const WeightFormat& format, std::ostream* out) { *out << format.describe(); }
}  // namespace llamacl

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// One device, one harness per launch shape (built once per process).
// The device and the harnesses below are never destroyed: releasing OpenCL objects from exit's destructors
// runs after the implementation's own teardown has begun (Oclgrind's LLVM state, which then corrupts the heap).
Device& test_device() {
    static Device* device = new Device(Device::open("", ""));  // PoCL in CI
    return *device;
}

const std::string kTensorCoresEmulated = "tensor_cores_emulated";
// The GPU shape with prefill's portable GEMMs even where the device has tensor cores; and those built with
// steps of k of 16 (the tunable GEMM_TK), as GPUs whose local memory is under the 64 x 64 tile's buffers
// of 32 steps build them.
const std::string kPortableGemm = "gpu_portable_gemm", kGemmStepsOf16 = "gpu_portable_gemm_steps_of_16";

// ggml's Q8_0 rule comes from GGUF files, whose models normalize with their own epsilon: its builds take
// a GGUF model's, 1e-6.
float norm_eps_for(const WeightFormat& weights) { return weights.rule == QuantRule::ggml ? 1e-6f : Config{}.norm_eps; }

KernelHarness& harness(const std::string& shape_name, const WeightFormat& weights) {
    static auto& cache = *new std::map<std::pair<std::string, std::string>, std::unique_ptr<KernelHarness>>;
    auto& h = cache[{shape_name, weights.describe() + (weights.rule == QuantRule::ggml ? " ggml" : "")}];
    if (!h) {
        Device& device = test_device();
        // "tensor_cores_emulated": the GPU shape with prefill's tensor-core GEMMs, their instruction emulated.
        const bool emulated = shape_name == kTensorCoresEmulated;
        const bool short_steps = shape_name == kGemmStepsOf16, portable = short_steps || shape_name == kPortableGemm;
        h = std::make_unique<KernelHarness>(
            device, parse_launch_shape(emulated || portable ? "gpu" : shape_name, device.info()), weights, true,
            emulated ? TensorCores::emulated : portable ? TensorCores::never : TensorCores::where_present,
            short_steps ? "-DGEMM_TK=16" : "", norm_eps_for(weights));
    }
    return *h;
}

std::string failure_lines(const KernelCheckResult& r) {
    std::string out;
    for (const std::string& line : r.failures) out += line + "\n";
    return out;
}

#define EXPECT_KERNEL_CHECK_PASSES(result)                                  \
    do {                                                                    \
        const KernelCheckResult r_ = (result);                              \
        EXPECT_TRUE(r_.passed()) << r_.name << ":\n" << failure_lines(r_); \
    } while (0)

// (launch shape, weight format)
class KernelVsReference : public ::testing::TestWithParam<std::tuple<std::string, WeightFormat>> {
protected:
    KernelHarness& h() { return harness(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(KernelVsReference, AttnQkvRope) { EXPECT_KERNEL_CHECK_PASSES(check_attn_qkv_rope(h())); }
TEST_P(KernelVsReference, Attention) { EXPECT_KERNEL_CHECK_PASSES(check_attention(h())); }
TEST_P(KernelVsReference, AttentionLongContext) { EXPECT_KERNEL_CHECK_PASSES(check_attention_long_context(h())); }
TEST_P(KernelVsReference, MatvecResidual) { EXPECT_KERNEL_CHECK_PASSES(check_matvec_residual(h())); }
TEST_P(KernelVsReference, FfnGateUp) { EXPECT_KERNEL_CHECK_PASSES(check_ffn_gate_up(h())); }
TEST_P(KernelVsReference, ClassifierBlocks) { EXPECT_KERNEL_CHECK_PASSES(check_classifier(h())); }
TEST_P(KernelVsReference, GreedyArgmaxAndEmbedding) { EXPECT_KERNEL_CHECK_PASSES(check_greedy_argmax(h())); }
// Prefill's kernels, on the shapes that run them (not ordered ones: KernelSet::prefill_possible).
class PrefillKernelVsReference : public KernelVsReference {};
TEST_P(PrefillKernelVsReference, RmsnormRows) { EXPECT_KERNEL_CHECK_PASSES(check_rmsnorm_rows(h())); }
TEST_P(PrefillKernelVsReference, Gemm) { EXPECT_KERNEL_CHECK_PASSES(check_gemm(h())); }
TEST_P(PrefillKernelVsReference, AttentionRows) { EXPECT_KERNEL_CHECK_PASSES(check_attention_rows(h())); }

// Prefill's kernels of one family of formats: float builds fuse RoPE and SwiGLU into their GEMMs, Q8_0's
// quantize each GEMM's input and run RoPE and SwiGLU as kernels of their own.
class FloatKernelVsReference : public KernelVsReference {};
TEST_P(FloatKernelVsReference, GemmQkvRope) { EXPECT_KERNEL_CHECK_PASSES(check_gemm_qkv_rope(h())); }
TEST_P(FloatKernelVsReference, GemmGateUp) { EXPECT_KERNEL_CHECK_PASSES(check_gemm_gate_up(h())); }
class Q8KernelVsReference : public KernelVsReference {};
TEST_P(Q8KernelVsReference, QuantizeRows) { EXPECT_KERNEL_CHECK_PASSES(check_quantize_rows(h())); }
TEST_P(Q8KernelVsReference, RopeRows) { EXPECT_KERNEL_CHECK_PASSES(check_rope_rows(h())); }
TEST_P(Q8KernelVsReference, Swiglu) { EXPECT_KERNEL_CHECK_PASSES(check_swiglu(h())); }

// The GEMMs on the tensor-core kernels, their instruction emulated here (on NVIDIA's GPUs of compute
// capability 8.0 on, the "gpu" shape runs them for real), and on the portable kernels, in steps of 32 where
// local memory holds them and in steps of 16.
class GemmVsReference : public KernelVsReference {};
TEST_P(GemmVsReference, Gemm) { EXPECT_KERNEL_CHECK_PASSES(check_gemm(h())); }
TEST_P(GemmVsReference, GemmQkvRope) { EXPECT_KERNEL_CHECK_PASSES(check_gemm_qkv_rope(h())); }
TEST_P(GemmVsReference, GemmGateUp) { EXPECT_KERNEL_CHECK_PASSES(check_gemm_gate_up(h())); }
class Q8GemmVsReference : public KernelVsReference {};
TEST_P(Q8GemmVsReference, RunsOnTensorCores) { EXPECT_TRUE(h().kernels.tensor_cores()); }
TEST_P(Q8GemmVsReference, Gemm) { EXPECT_KERNEL_CHECK_PASSES(check_gemm(h())); }

// The chunking policy: enough (head, chunk) work-groups for the device, no chunk with fewer keys'
// elements than the minimum, one chunk where no work-group can combine them (CPU shapes, OpenCL C 1.2) or
// where a head's softmax adds in order (ordered shapes), and where they can, none longer than the scores'
// capacity.
TEST_P(KernelVsReference, AttentionChunks) {
    const KernelSet& k = this->h().kernels;
    const int head_size = 64, positions_per_chunk = KernelSet::kMinAttentionChunk / head_size;
    for (int positions : {1, positions_per_chunk - 1, positions_per_chunk, 3 * positions_per_chunk + 5,
                          100 * positions_per_chunk}) {
        const int chunks = k.attention_chunks(1, head_size, positions);
        if (!k.chunked_attention()) {
            EXPECT_EQ(chunks, 1);
            continue;
        }
        EXPECT_GE(chunks, 1);
        EXPECT_LE(chunks, KernelSet::kMaxAttentionChunks);
        if (chunks > 1) {
            EXPECT_GE(positions / chunks, positions_per_chunk) << positions << " positions in " << chunks << " chunks";
        }
        EXPECT_LE(chunks, k.attention_chunks(1, head_size, positions + positions_per_chunk)) << "grows with context";
    }
    if (k.chunked_attention()) {
        EXPECT_GT(k.attention_chunks(1, head_size, 100 * positions_per_chunk), 1);
        for (int pos : {KernelSet::kScoreCapacity - 1, KernelSet::kScoreCapacity, 20 * KernelSet::kScoreCapacity + 3}) {
            const int chunk_len = k.attention_chunk_len(1, head_size, pos);
            EXPECT_LE(chunk_len, KernelSet::kScoreCapacity) << "at " << pos;
            EXPECT_LE(attention_chunk_count(pos, chunk_len),
                      max_attention_chunks(Config{64, 64, 1, 1, 1, 64, 20 * KernelSet::kScoreCapacity + 4, true}))
                << "the partial results' buffer holds every chunk";
        }
    }
    if (!k.shape().gpu_family()) {
        EXPECT_FALSE(k.device_fences()) << "CPU shapes are built as OpenCL C 1.2";
    }
}


// attention_tiles takes every head size up to its bound, on GPU shapes only; at the bound (7B's heads) its
// local memory, with the 1 KiB attention_tiles_possible leaves the compiler, fits the 48 KiB NVIDIA's
// OpenCL gives a work-group (this machine's device may give more).
TEST(AttentionTiles, GpuShapesUpToTheHeadBound) {
    Device& device = test_device();
    const KernelSet gpu(device, parse_launch_shape("gpu", device.info()));
    for (int head_size : {1, 6, 48, 64, 127, KernelSet::kAttentionTilesHeadMax})
        EXPECT_TRUE(gpu.attention_tiles_possible(head_size)) << head_size;
    EXPECT_FALSE(gpu.attention_tiles_possible(KernelSet::kAttentionTilesHeadMax + 1));
    const KernelSet cpu(device, parse_launch_shape("cpu", device.info()));
    EXPECT_FALSE(cpu.attention_tiles_possible(64));
    std::size_t bytes = 1024;
    for (const cl::LocalSpaceArg& local : gpu.attention_tiles_local(KernelSet::kAttentionTilesHeadMax)) bytes += local.size_;
    EXPECT_LE(bytes, std::size_t{48} << 10);
}

// The bound the capacity plan counts: a chunk of at least kMinAttentionChunk keys' elements, at most
// kMaxAttentionChunks chunks, unless a context needs more to keep each within kScoreCapacity positions
// (Config: dim, hidden, layers, heads, kv heads, vocab, seq_len, shared).
TEST(MaxAttentionChunks, CappedUntilChunksWouldOutgrowTheScoreCapacity) {
    const int per_chunk = KernelSet::kMinAttentionChunk / 64;  // positions, with head_size 64 below
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, per_chunk - 1, true}), 1);
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, 3 * per_chunk + 5, true}), 3);
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, 100 * per_chunk, true}), KernelSet::kMaxAttentionChunks);
    const int beyond = KernelSet::kMaxAttentionChunks * KernelSet::kScoreCapacity + 1;
    EXPECT_EQ(max_attention_chunks(Config{512, 100, 1, 8, 8, 100, beyond, true}), KernelSet::kMaxAttentionChunks + 1);
}

// The rule that chooses a GEMM's tile: the largest that gives at least the share asked of the compute
// units (132 in these cases: 93 work-groups for 70 %) a work-group and, on the portable kernels, past one
// round, rounds 80 % full on average; else the one with the most work-groups; blocks per matrix, each
// matrix's rows rounded up.
TEST(GemmTile, LargestTileThatGivesTheShareOfComputeUnitsAWorkGroup) {
    EXPECT_EQ(gemm_blocks({2048, 512, 512}, 128), 24);
    EXPECT_EQ(gemm_blocks({288, 288, 288}, 128), 9);  // 3 blocks each, the last of each part-filled
    const GemmTileRule tc = kTensorCoreTileRule, simt = kPortableTileRule;
    EXPECT_EQ(gemm_tile({2 * 8192}, 512, 132, tc), (GemmTile{128, 128}));       // 1B's gate_up: 512 groups
    EXPECT_EQ(gemm_tile({2 * 8192}, 512, 132, simt), (GemmTile{128, 128}));     // 4 rounds, 97 % full
    EXPECT_EQ(gemm_tile({2048, 512, 512}, 512, 132, tc), (GemmTile{128, 128}));  // 1B's qkv: 96
    // 96; 192, 2 rounds 73 % full; 384, 3 rounds 97 % full.
    EXPECT_EQ(gemm_tile({2048, 512, 512}, 512, 132, simt), (GemmTile{64, 64}));
    EXPECT_EQ(gemm_tile({2048}, 512, 132, tc), (GemmTile{128, 64}));            // 1B's wo: 64, then 128
    EXPECT_EQ(gemm_tile({2048}, 512, 132, simt), (GemmTile{64, 64}));           // 64, 128, then 256
    EXPECT_EQ(gemm_tile({2 * 11008}, 512, 132, simt), (GemmTile{128, 128}));    // 7B's gate_up: 688, 87 % of 6
    EXPECT_EQ(gemm_tile({4096}, 512, 132, simt), (GemmTile{128, 64}));          // 7B's wo: 128, then 256
    EXPECT_EQ(gemm_tile({2048}, 256, 132, tc), (GemmTile{64, 64}));             // 32, 64, then 128
    EXPECT_EQ(gemm_tile({768}, 512, 132, tc), (GemmTile{64, 64}));              // 110M's wo: 24, 48, then 96
    EXPECT_EQ(gemm_tile({768}, 64, 132, simt), (GemmTile{64, 64}));             // 6, 6, 12: the most
    EXPECT_EQ(gemm_tile({768, 768, 768}, 512, 132, simt), (GemmTile{64, 64}));  // 110M's qkv: 72; 144, 55 %; 288, 73 %: the most
    EXPECT_EQ(gemm_tile({5}, 1, 132, simt), (GemmTile{128, 128}));               // one group whichever: the largest
}

// A tile the device cannot run (its compiler refuses the build, or its work-group is beyond the device's
// registers or local memory: 32 KiB GPUs and the 34 KiB tile of 128 x 128) runs as the smallest tile
// instead of failing the prefill. gemm_gpu.cl refuses any side but 64 and 128 (#error), so a tile of 96
// rows is one the compiler refuses on every device.
TEST(GemmTile, ATileTheDeviceCannotRunTakesTheSmallestTilesBuild) {
    KernelHarness& h = harness("gpu", WeightFormat{});
    const GemmTile refused{96, 64};
    EXPECT_FALSE(h.kernels.gemm_tile_runs(refused));
    EXPECT_TRUE(h.kernels.gemm_tile_runs(kOwnGemmTile));
    const KernelSet::Launch asked = h.kernels.gemm(KernelSet::Gemm::gate_up, {2 * 192}, 100, refused);
    const KernelSet::Launch own = h.kernels.gemm(KernelSet::Gemm::gate_up, {2 * 192}, 100, kOwnGemmTile);
    EXPECT_EQ((*asked.kernel)(), (*own.kernel)());  // the same OpenCL kernel
    // Blocks of the smallest tile: 384 rows in 6 of 64, 100 positions in 2 of 64, a work-group each.
    EXPECT_EQ(asked.range.global[0], 6u * asked.range.local[0]);
    EXPECT_EQ(asked.range.global[1], 2u * asked.range.local[1]);
    // A CPU shape has no tiles to choose.
    EXPECT_FALSE(harness("cpu", WeightFormat{}).kernels.gemm_tile_runs(kOwnGemmTile));
}

// A GPU whose local memory holds no GEMM tile (16 KiB: the smallest, 64 x 64, takes 17 KiB on PoCL) runs none:
// its prompt goes position by position (prefill_possible), so check's kernel rung leaves prefill's kernels
// out, and what it checks passes.
TEST(GemmTile, ADeviceThatHoldsNoTileRunsNoneAndChecksNoPrefillKernel) {
    Device device = test_device().with_local_memory(16 * 1024);
    KernelHarness h(device, parse_launch_shape("gpu", device.info()));
    for (const GemmTile& tile : kGemmTiles) EXPECT_FALSE(h.kernels.gemm_tile_runs(tile));
    EXPECT_FALSE(h.kernels.prefill_possible(Config{64, 128, 1, 4, 4, 32, 16, true}));
    const std::vector<KernelCheck> checks = kernel_checks(h);
    EXPECT_EQ(checks.size(), 7u);
    EXPECT_EQ(std::count(checks.begin(), checks.end(), KernelCheck{check_gemm}), 0);
    for (const KernelCheckResult& r : check_all_kernels(h)) EXPECT_TRUE(r.passed()) << r.name << ": " << r.failures.front();
    // The device's own local memory holds the smallest tile.
    EXPECT_TRUE(harness("gpu", WeightFormat{}).kernels.gemm_tile_runs(kOwnGemmTile));
}

// The rule that gives short matrices more work-items per row: double while the launch has fewer groups
// than asked, a row still has four elements per work-item and a group still holds a row.
TEST(WidenedRowThreads, DoublesUntilTheLaunchHasEnoughGroups) {
    const LaunchShape gpu{16, 256, 1};
    // 4096 rows, 16 per group: 256 groups; 264 asked -> 32 per row (8 rows a group, 512 groups).
    EXPECT_EQ(widened_row_threads(gpu, 4096, 4096, 264), 32);
    EXPECT_EQ(widened_row_threads(gpu, 4096, 4096, 256), 16);  // already enough
    EXPECT_EQ(widened_row_threads(gpu, 2048, 8192, 264), 64);  // 128 -> 256 -> 512 groups
    // Bounded by the group (one row per group of 256) and by four elements per work-item (n = 512: 128).
    EXPECT_EQ(widened_row_threads(gpu, 3, 100000, 1000), 256);
    EXPECT_EQ(widened_row_threads(gpu, 3, 512, 1000), 128);
    EXPECT_EQ(widened_row_threads(gpu, 3, 40, 1000), 16);  // never narrower than the shape's own
    // CPU shapes keep one work-item per row.
    EXPECT_EQ(widened_row_threads(LaunchShape{1, 1, 16}, 3, 100000, 1000), 1);
}

// "exact" is run.c's bits on any device: on CPUs the exact family, on GPUs the gpu shape with ordered sums,
// whose float weights run in the exact family's work-groups of 8; "exact:ROWxLOCAL" orders any shape.
TEST(LaunchShapes, ExactOrdersTheGpuShapeOnGpus) {
    DeviceInfo gpu;
    gpu.max_work_group_size = 1024;
    const LaunchShape exact = parse_launch_shape("exact", gpu);
    EXPECT_EQ(exact, (LaunchShape{16, 256, 1, true}));
    EXPECT_TRUE(exact.exact());
    EXPECT_TRUE(exact.gpu_family());
    EXPECT_EQ(shape_for(exact, WeightFormat::q4_0()), exact);
    EXPECT_EQ(shape_for(exact, WeightFormat{ElementType::q8_0, 64}), exact);
    EXPECT_EQ(shape_for(exact, WeightFormat{ElementType::f16}), (LaunchShape{1, 8, 1}));
    // Its prompts run a position at a time: no batch to hold (the float weights' 1x8 keeps its own).
    const Config c{64, 64, 1, 1, 1, 64, 256, true};
    EXPECT_EQ(prefill_batch_for(exact, c), 1);
    EXPECT_EQ(prefill_batch_for(launch_shape_for(exact, gpu, WeightFormat{ElementType::f32}), c), kCpuPrefillBatch);
    EXPECT_EQ(parse_launch_shape("exact:32x128", gpu), (LaunchShape{32, 128, 1, true}));
    EXPECT_EQ(parse_launch_shape("exact:1x8", gpu), (LaunchShape{1, 8, 1}));  // the exact family already
    EXPECT_FALSE(parse_launch_shape("32x128", gpu).exact());
    EXPECT_FALSE(parse_launch_shape("gpu", gpu).exact());
    EXPECT_EQ(shape_for(parse_launch_shape("gpu", gpu), WeightFormat{ElementType::f32}), (LaunchShape{16, 256, 1}));
    for (const char* bad : {"exact:", "exact:3x8", "exact:16x8", "exact:gpu", "exact16x256"})
        EXPECT_THROW(parse_launch_shape(bad, gpu), Error) << bad;
    DeviceInfo cpu = gpu;
    cpu.is_cpu = true;
    EXPECT_EQ(parse_launch_shape("exact", cpu), (LaunchShape{1, 1, 1}));
    // A device's smaller work-groups: a row keeps a work-group's work-items.
    gpu.max_work_group_size = 8;
    EXPECT_EQ(parse_launch_shape("exact:16x256", gpu), (LaunchShape{8, 8, 1, true}));
}

// An ordered shape's work-group keeps two rows' group terms a row of its own after the staged input: an
// H100's 48 KiB hold 1B's 8192-wide q4_0 input with 16 rows' terms (16x256), not with 32 (8x256).
TEST(StagedBytes, OrderedShapesAddTheirRowsTerms) {
    const WeightFormat q8{ElementType::q8_0, 64}, q4 = WeightFormat::q4_0(), f32{ElementType::f32};
    const LaunchShape gpu{16, 256, 1}, ordered{16, 256, 1, true};
    EXPECT_EQ(staged_bytes(gpu, q8, 8192), staged_input_bytes(q8, 8192));
    EXPECT_EQ(staged_bytes(ordered, q8, 8192), staged_input_bytes(q8, 8192) + 2 * 16 * 129 * sizeof(float));
    EXPECT_EQ(staged_bytes(ordered, f32, 8192), staged_input_bytes(f32, 8192));
    DeviceInfo h100;
    h100.local_mem_bytes = 48 * 1024;
    EXPECT_TRUE(staged_input_fits(h100, ordered, q4, 8192));
    EXPECT_FALSE(staged_input_fits(h100, LaunchShape{8, 256, 1, true}, q4, 8192));
    EXPECT_TRUE(staged_input_fits(h100, LaunchShape{8, 256, 1}, q4, 8192));
}

// The rule that gives work-items with long shares of a row the long batch of loads.
TEST(DotBatch, LongOnlyWhenEveryWorkItemHasAWholeBatch) {
    EXPECT_EQ(dot_batch(4096, 16), kLongDotBatch);   // 7B's rows: 256 elements per work-item
    EXPECT_EQ(dot_batch(2048, 64), kLongDotBatch);   // exactly one long batch each
    EXPECT_EQ(dot_batch(2047, 64), kShortDotBatch);  // one element short of it
    EXPECT_EQ(dot_batch(768, 64), kShortDotBatch);   // stories110M's widened rows: 12 each
    EXPECT_LT(kShortDotBatch, kLongDotBatch);
}

// The token kernel's batch (32 work-items per row): a dim row's share per work-item when it is longer than
// dot_batch's choice and fits a long batch, so that a step's rows of dim load in its first batch.
TEST(DotBatch, TokenKernelBatchCoversADimRowUpToTheLongBatch) {
    EXPECT_EQ(token_dot_batch(768, 288, 32), 9);               // stories15M: 9 floats of a dim row each
    EXPECT_EQ(token_dot_batch(2048, 768, 32), kLongDotBatch);  // stories110M: w2's long rows; 24 fit in it
    EXPECT_EQ(token_dot_batch(172, 64, 32), kShortDotBatch);   // stories260K: 2 each
    EXPECT_EQ(token_dot_batch(8192, 2048, 32), kLongDotBatch); // llama3.2-1b: a share of 64 is not taken
}

// ---------------------------------------------------------------------------------------------------
// Tensor cores: prefill's GEMMs with split TF32 operands (3xTF32) stay within fp32's error bound for a
// dot product of n terms, |error| <= (2 n 2^-24 + 2^-20) sum |w x| (summation with rounding or, in a
// tensor core's adder, truncation; the operands' split, about 2^-21 of each product twice over), which
// products of plain TF32 operands (2^-11 each) miss. The "gpu" shape runs them for real on NVIDIA's GPUs
// of compute capability 8.0 on, the portable kernels elsewhere; the emulation everywhere.
TEST(TensorCores, SplitOperandsKeepFp32Accuracy) {
    const int n = 200, rows = 130, positions = 65;
    std::mt19937 rng(77);
    const auto w = random_vector(static_cast<std::size_t>(rows) * n, rng);
    const auto in = random_vector(static_cast<std::size_t>(positions) * n, rng, -2.0f, 2.0f);
    const auto bound_ratio = [&](const std::function<double(int, int)>& value) {
        double worst = 0;
        for (int p = 0; p < positions; ++p) {
            for (int r = 0; r < rows; ++r) {
                double exact = 0, magnitude = 0;
                for (int k = 0; k < n; ++k) {
                    const double term = static_cast<double>(w[static_cast<std::size_t>(r) * n + k]) *
                                        in[static_cast<std::size_t>(p) * n + k];
                    exact += term;
                    magnitude += std::fabs(term);
                }
                const double bound = (2.0 * n * std::ldexp(1.0, -24) + std::ldexp(1.0, -20)) * magnitude;
                worst = std::max(worst, std::fabs(value(p, r) - exact) / bound);
            }
        }
        return worst;
    };
    // The bound tells plain TF32 from fp32: products of operands rounded to TF32 exceed it.
    const auto tf32 = [](float x) {
        return std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) + 0x1000u) & 0xffffe000u);
    };
    EXPECT_GT(bound_ratio([&](int p, int r) {
                  double sum = 0;
                  for (int k = 0; k < n; ++k)
                      sum += static_cast<double>(tf32(w[static_cast<std::size_t>(r) * n + k])) *
                             tf32(in[static_cast<std::size_t>(p) * n + k]);
                  return sum;
              }),
              1.0);
    for (const std::string& shape : {std::string("gpu"), kTensorCoresEmulated}) {
        KernelHarness& h = harness(shape, WeightFormat{});
        SCOPED_TRACE(shape + (h.kernels.tensor_cores() ? ": tensor cores" : ": portable kernels"));
        cl::Buffer out = h.upload(std::vector<float>(static_cast<std::size_t>(positions) * rows, kNaN));
        const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gemm, {rows}, positions);
        h.run(*l.kernel, signatures::gemm, l.range,
              {{"w", h.upload(w)}, {"in", h.upload(in)}, {"out", out}, {"out_offset", 0}, {"n", n}, {"rows", rows},
               {"positions", positions}, {"accumulate", 0}});
        const auto got = h.download(out, static_cast<std::size_t>(positions) * rows);
        EXPECT_LE(bound_ratio([&](int p, int r) { return got[static_cast<std::size_t>(p) * rows + r]; }), 1.0);
    }
}

// --prompt-precision fast: the tensor cores' GEMM of float weights takes one TF32 product a multiply-add,
// a_hi b_hi. An operand rounded to TF32 (to nearest, 10 stored mantissa bits) is within 2^-11 of itself
// relatively, so a product of two is within 2^-10 + 2^-22 of w x, and exact in the fp32 accumulator; a sum
// of n of them is within (2^-10 + 2^-22 + 2 n 2^-24) sum |w x| of the dot product (the summation's share as
// above). The emulation adds the products in k's order: its sums are fp32 fmas of the rounded operands, bit
// for bit. Exact's split operands give other bits, within fp32's bound, which fast's exceed.
TEST(TensorCores, FastPrecisionTakesOneTf32Product) {
    const int n = 200, rows = 130, positions = 65;
    std::mt19937 rng(78);
    const auto w = random_vector(static_cast<std::size_t>(rows) * n, rng);
    const auto in = random_vector(static_cast<std::size_t>(positions) * n, rng, -2.0f, 2.0f);
    const auto tf32 = [](float x) {
        return std::bit_cast<float>((std::bit_cast<std::uint32_t>(x) + 0x1000u) & 0xffffe000u);
    };
    Device& device = test_device();
    for (const ElementType type : {ElementType::f32, ElementType::f16}) {
        const WeightFormat format{type};
        SCOPED_TRACE(format.describe());
        KernelHarness& exact = harness(kTensorCoresEmulated, format);
        KernelHarness fast(device, parse_launch_shape("gpu", device.info()), format, true, TensorCores::emulated, "",
                           norm_eps_for(format), PromptPrecision::fast);
        ASSERT_EQ(fast.kernels.prompt_precision(), PromptPrecision::fast);
        ASSERT_EQ(exact.kernels.prompt_precision(), PromptPrecision::exact);
        const auto product = [&](KernelHarness& h) {
            const KernelHarness::Matrix m = h.upload_matrix(w, rows, n);
            cl::Buffer out = h.upload(std::vector<float>(static_cast<std::size_t>(positions) * rows, kNaN));
            const KernelSet::Launch l = h.kernels.gemm(KernelSet::Gemm::gemm, {rows}, positions);
            h.run(*l.kernel, signatures::gemm, l.range,
                  {{"w", m.buffer}, {"in", h.upload(in)}, {"out", out}, {"out_offset", 0}, {"n", n}, {"rows", rows},
                   {"positions", positions}, {"accumulate", 0}});
            return std::make_pair(m.widened(), h.download(out, static_cast<std::size_t>(positions) * rows));
        };
        const auto [widened, got] = product(fast);
        const auto exact_got = product(exact).second;
        // Worst error over the bound: fast's TF32 one, and fp32's (SplitOperandsKeepFp32Accuracy's).
        double tf32_worst = 0, fp32_worst = 0;
        int emulation_mismatches = 0;
        for (int p = 0; p < positions; ++p) {
            for (int r = 0; r < rows; ++r) {
                double dot = 0, magnitude = 0;
                float emulated = 0.0f;
                for (int k = 0; k < n; ++k) {
                    const float wk = widened[static_cast<std::size_t>(r) * n + k];
                    const float xk = in[static_cast<std::size_t>(p) * n + k];
                    dot += static_cast<double>(wk) * xk;
                    magnitude += std::fabs(static_cast<double>(wk) * xk);
                    emulated = std::fma(tf32(wk), tf32(xk), emulated);
                }
                const float value = got[static_cast<std::size_t>(p) * rows + r];
                const double error = std::fabs(value - dot);
                tf32_worst = std::max(tf32_worst, error / ((std::ldexp(1.0, -10) + std::ldexp(1.0, -22) +
                                                            2.0 * n * std::ldexp(1.0, -24)) * magnitude));
                fp32_worst = std::max(fp32_worst,
                                      error / ((2.0 * n * std::ldexp(1.0, -24) + std::ldexp(1.0, -20)) * magnitude));
                if (std::bit_cast<std::uint32_t>(value) != std::bit_cast<std::uint32_t>(emulated)) ++emulation_mismatches;
            }
        }
        EXPECT_LE(tf32_worst, 1.0);
        EXPECT_GT(fp32_worst, 1.0) << "fast's sums are within fp32's bound: not one TF32 product";
        EXPECT_EQ(emulation_mismatches, 0) << "of " << positions * rows << " sums";
        EXPECT_NE(got, exact_got);
    }
}

// ---------------------------------------------------------------------------------------------------
// Warp shuffles (NVIDIA): the GPU shape's reductions combine a row's lanes, a score's slices and a
// work-group's last 32 partial results by shuffles instead of local memory, adding the same pairs in the
// same order, so every output must be the same bits as the local-memory trees' build gives.

TEST(WarpShuffles, SameBitsAsLocalMemoryTrees) {
    Device& device = test_device();
    const LaunchShape shape = parse_launch_shape("gpu", device.info());
    KernelHarness shuffles(device, shape), trees(device, shape, {}, false);
    if (!shuffles.kernels.warp_shuffles())
        GTEST_SKIP() << device.info().name << " offers no warp shuffles (NVIDIA's 32-wide warps): nothing to compare";
    ASSERT_FALSE(trees.kernels.warp_shuffles());
    std::mt19937 rng(2024);
    // (Both builds' outputs are also checked against the reference: KernelShapes/KernelVsReference.gpu_f32.)
    const auto same = [&](const std::function<cl::Buffer(KernelHarness&)>& run, std::size_t n, const std::string& what) {
        const std::vector<float> got = shuffles.download(run(shuffles), n);
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](float v) { return std::isfinite(v); })) << what;
        KernelCheckResult result(what);
        KernelComparer(result).bit_identical(got, trees.download(run(trees), n), what);
        EXPECT_TRUE(result.passed()) << failure_lines(result);
    };
    // attn_qkv_rope (the RMSNorm's group sum, each row pair's lane sums) and matvec_residual (a row's lane
    // sums), with rows enough that the launch keeps rows of at most a warp's lanes (widened_row_threads).
    const int dim = 2048, head_size = 64, rows = 4096, n = 512;
    const auto x = random_vector(dim, rng, -2.0f, 2.0f), norm = random_vector(dim, rng, 0.5f, 1.5f);
    const auto wq = random_vector(static_cast<std::size_t>(dim) * dim, rng);
    const auto rope = rope_table(1, Rope{head_size});
    same([&](KernelHarness& h) {
        cl::Buffer q = h.upload(std::vector<float>(dim, kKernelSentinel)), xn = h.upload(std::vector<float>(dim));
        cl::Buffer keys = h.upload(std::vector<float>(dim)), values = h.upload(std::vector<float>(dim));
        const cl::Buffer w = h.upload(wq);
        h.run(KernelSet::Matvec::attn_qkv_rope, (3 * dim) / 2, dim,
              {{"x", h.upload(x)}, {"rms_weight", h.upload(norm)}, {"wq", w}, {"wk", w}, {"wv", w},
               {"rope", h.upload(rope)}, {"q", q}, {"key_cache", keys}, {"value_cache", values}, {"xn", xn},
               {"dim", dim}, {"kv_dim", dim}, {"head_size", head_size}, {"pos", 0},
               {"staged", h.kernels.staged_space(dim)}, {"staged_n", h.kernels.staged_count(dim)}});
        return q;
    }, dim, "attn_qkv_rope's q");
    const auto w = random_vector(static_cast<std::size_t>(rows) * n, rng), in = random_vector(n, rng);
    const auto residual = random_vector(rows, rng);
    same([&](KernelHarness& h) {
        cl::Buffer out = h.upload(residual);
        h.run(KernelSet::Matvec::matvec_residual, rows, n,
              {{"w", h.upload(w)}, {"in", h.upload(in)}, {"x", out}, {"n", n}, {"rows", rows},
               {"staged", h.kernels.staged_space(n)}, {"staged_n", h.kernels.staged_count(n)}});
        return out;
    }, rows, "matvec_residual's x");
    // attention (the scores' slices, the softmax's group max and sum), one chunk and eight.
    const int heads = 6, pos = 200, head = 48;
    const auto q = random_vector(heads * head, rng, -2.0f, 2.0f);
    const auto keys = random_vector(static_cast<std::size_t>(pos + 1) * heads * head, rng);
    const auto values = random_vector(keys.size(), rng);
    for (int chunk_len : {pos + 1, 26}) {
        const int chunks = attention_chunk_count(pos, chunk_len);
        same([&](KernelHarness& h) {
            cl::Buffer out = h.upload(std::vector<float>(q.size(), kNaN));
            h.run(h.kernels.own().attention, signatures::attention, h.kernels.heads(heads, chunks),
                  {{"q", h.upload(q)}, {"key_cache", h.upload(keys)}, {"value_cache", h.upload(values)},
                   {"att", h.upload(std::vector<float>(1))}, {"out", out},
                   {"partial_out", h.upload(std::vector<float>(static_cast<std::size_t>(heads) * chunks * (head + 2)))},
                   {"arrivals", h.upload(std::vector<float>(heads, 0.0f))}, {"n_heads", heads}, {"head_size", head},
                   {"kv_dim", heads * head}, {"kv_mul", 1}, {"seq_len", pos + 1}, {"pos", pos},
                   {"chunk_len", chunk_len}});
            return out;
        }, q.size(), "attention in " + std::to_string(chunks) + " chunks");
    }
}

// Q8_0 in groups of 4 (the shared version-2 files'), 24 (no power of two, fewer than the GPU layout's
// interleaved 32, read 8 bytes at a time there) and 64 (export.py's, 16 bytes at a time); and GGUF's,
// ggml's rule in blocks of 32. Q4_0 (ggml's) beside them.
const WeightFormat kGgmlQ8{ElementType::q8_0, 32, QuantRule::ggml}, kQ4 = WeightFormat::q4_0();
const auto kShapes = ::testing::Values("exact", "1x8", "cpu", "gpu", "4x16", "2x2", "exact:4x16");
const auto kPrefillShapes = ::testing::Values("exact", "1x8", "cpu", "gpu", "4x16", "2x2");
const auto kFloatFormats = ::testing::Values(WeightFormat{ElementType::f32}, WeightFormat{ElementType::f16});
const auto kFormats = ::testing::Values(WeightFormat{ElementType::f32}, WeightFormat{ElementType::f16},
                                        WeightFormat{ElementType::q8_0, 4}, WeightFormat{ElementType::q8_0, 24},
                                        WeightFormat{ElementType::q8_0, 64}, kGgmlQ8, kQ4);
const auto kQ8Formats = ::testing::Values(WeightFormat{ElementType::q8_0, 4}, WeightFormat{ElementType::q8_0, 24},
                                          WeightFormat{ElementType::q8_0, 64}, kGgmlQ8, kQ4);
std::string param_name(const ::testing::TestParamInfo<std::tuple<std::string, WeightFormat>>& p) {
    const WeightFormat& f = std::get<1>(p.param);
    std::string shape = std::get<0>(p.param);
    std::replace(shape.begin(), shape.end(), ':', '_');
    return shape + "_" + element_name(f.type) +
           (f.group_size ? "_g" + std::to_string(f.group_size) : "") + (f.rule == QuantRule::ggml ? "_ggml" : "");
}
INSTANTIATE_TEST_SUITE_P(KernelShapes, KernelVsReference, ::testing::Combine(kShapes, kFormats), param_name);
INSTANTIATE_TEST_SUITE_P(KernelShapes, PrefillKernelVsReference, ::testing::Combine(kPrefillShapes, kFormats),
                         param_name);
INSTANTIATE_TEST_SUITE_P(KernelShapes, FloatKernelVsReference, ::testing::Combine(kPrefillShapes, kFloatFormats),
                         param_name);
INSTANTIATE_TEST_SUITE_P(KernelShapes, Q8KernelVsReference, ::testing::Combine(kPrefillShapes, kQ8Formats), param_name);
INSTANTIATE_TEST_SUITE_P(KernelShapes, GemmVsReference,
                         ::testing::Combine(::testing::Values(kTensorCoresEmulated, kPortableGemm, kGemmStepsOf16),
                                            ::testing::Values(WeightFormat{ElementType::f32},
                                                              WeightFormat{ElementType::f16})),
                         param_name);
// Q8_0 on int8 tensor cores: groups of one step of k (32), an odd number of steps (96), export.py's 64
// and ggml's blocks of 32; and Q4_0's.
INSTANTIATE_TEST_SUITE_P(KernelShapes, Q8GemmVsReference,
                         ::testing::Combine(::testing::Values(kTensorCoresEmulated),
                                            ::testing::Values(WeightFormat{ElementType::q8_0, 32},
                                                              WeightFormat{ElementType::q8_0, 64},
                                                              WeightFormat{ElementType::q8_0, 96}, kGgmlQ8, kQ4)),
                         param_name);

}  // namespace

// The register cap fits the asked-for work-groups in the register file a work-group may use, only where
// the device says how large that is and its compiler takes the option, and never below 64 registers.
TEST(RegisterCap, FitsTheWorkGroupsWhereTheCompilerTakesIt) {
    DeviceInfo nvidia;
    nvidia.registers_per_group = 65536;
    nvidia.register_cap_option = true;
    EXPECT_EQ(register_cap_option(nvidia, 2, 256), " -cl-nv-maxrregcount=128");
    EXPECT_EQ(register_cap_option(nvidia, 4, 256), " -cl-nv-maxrregcount=64");
    EXPECT_EQ(register_cap_option(nvidia, 8, 256), "") << "32 registers would spill";
    EXPECT_EQ(register_cap_option(nvidia, 2, 128), "") << "256 registers limit nothing";
    DeviceInfo no_option = nvidia;
    no_option.register_cap_option = false;
    EXPECT_EQ(register_cap_option(no_option, 2, 256), "");
    DeviceInfo no_count = nvidia;
    no_count.registers_per_group = 0;
    EXPECT_EQ(register_cap_option(no_count, 2, 256), "");
}

// The comparisons the checks are made of fail where they should: a single ulp where bits must agree, an
// error past the bound (NaN the worst of all), a written sentinel.
TEST(KernelComparer, FailsOnEveryKindOfMismatch) {
    const std::vector<float> want = {1.0f, -2.0f, 0.5f};
    std::vector<float> ulp = want;
    ulp[1] = std::nextafter(ulp[1], 0.0f);
    const std::vector<float> far = {1.0f, -2.0f, 0.5f + 1e-3f}, nan = {1.0f, kNaN, 0.5f};
    const auto fails = [](const std::function<void(KernelComparer&)>& compare) {
        KernelCheckResult r("comparer");
        KernelComparer cmp(r);
        compare(cmp);
        return !r.passed();
    };
    EXPECT_FALSE(fails([&](KernelComparer& c) { c.bit_identical(want, want, "same"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.bit_identical(ulp, want, "one ulp"); }));
    EXPECT_FALSE(fails([&](KernelComparer& c) { c.close(ulp, want, 1e-5, "one ulp, relative"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.close(far, want, 1e-4, "past the bound"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.close(nan, want, 1e9, "NaN"); }));
    EXPECT_FALSE(fails([&](KernelComparer& c) { c.untouched(std::vector<float>(4, kKernelSentinel), "sentinels"); }));
    EXPECT_TRUE(fails([&](KernelComparer& c) { c.untouched(std::vector<float>{kKernelSentinel, 0.0f}, "written"); }));
    KernelCheckResult r("figures");
    KernelComparer cmp(r);
    cmp.close(far, want, 1e-2, "within");
    EXPECT_NEAR(r.max_abs_err, 1e-3, 1e-7);
    EXPECT_DOUBLE_EQ(r.tolerance, 1e-2 * 2.0);  // relative to the largest magnitude
}
