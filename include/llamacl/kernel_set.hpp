#pragma once
// The compiled kernels for one launch shape (launch_shape.hpp), and the device quirks that decide how
// they are built and launched.
#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"
#include "llamacl/device_options.hpp"  // TensorCores, PromptPrecision
#include "llamacl/launch_shape.hpp"
#include "llamacl/on_first_use.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

// Work-items per row for a launch of `rows` rows of `n` elements: the shape's own, doubled (GPU shapes)
// while the launch would have fewer than `min_groups` work-groups, each work-item would still get at
// least four elements of the row, and a work-group still holds a whole row. A short matrix (wo and w2, every matrix
// of a small model) otherwise leaves compute units idle or too few work-items on each to hide latency.
int widened_row_threads(const LaunchShape& shape, int rows, int n, int min_groups);

// Weight loads each work-item of a GPU-shape matrix kernel issues together (DOT_BATCH in dot.cl) for a
// launch whose rows of `n` loads (spans: DeviceWeightLayout::span) have `row_threads` work-items each: a
// long batch when every work-item has at least that many loads (large models: fewer trips to memory),
// else a short one (a small model's rows, where the long batch's registers cost more than they save,
// even for rows it never takes a whole batch of). CPU shapes (row_threads 1) do not batch: the long
// batch for them, so that they need one build whatever n is.
constexpr int kLongDotBatch = 32, kShortDotBatch = 8;
int dot_batch(int n, int row_threads);
// The token kernel's batch, one for every step: dot_batch of its longest rows, but no shorter than a row
// of dim elements takes a work-item while that fits a long batch (KernelSet::token_program says why); both
// lengths in loads, as dot_batch's n.
int token_dot_batch(int longest_row, int dim, int row_threads);

// The compiler option that caps a kernel's registers so that `groups` work-groups of `local` work-items fit
// a compute unit ("-cl-nv-maxrregcount=N", NVIDIA's compilers), or "" where the device does not say its
// registers or take the option, where the cap would be under 64 (spilling then costs more than the
// work-groups gain), or where
// it would not limit anything (255 registers or more).
std::string register_cap_option(const DeviceInfo& device, int groups, int local);

// Local memory a matrix-vector kernel stages its input of n elements in: n floats, or for quantized
// weights its quantized values and their scales (kernels/dot_quantized.cl).
std::uint64_t staged_input_bytes(const WeightFormat& weights, int n);
// The staged input's and, for ordered shapes, the rows' terms after it (row_terms in
// kernels/dot_quantized.cl): a work-group's local memory for rows of n elements (KernelSet::staged_space).
std::uint64_t staged_bytes(const LaunchShape& shape, const WeightFormat& weights, int n);
// Whether that fits a work-group of `shape` on `device`, beside the reduction scratch and what the
// compiler keeps in local memory itself. Quantized formats' kernels need it: they read only the staged input.
bool staged_input_fits(const DeviceInfo& device, const LaunchShape& shape, const WeightFormat& weights, int n);

// A launch should have at least two work-groups per compute unit: fewer leave too few work-items in
// flight to hide memory latency, and more (widening further) costs the extra groups' norm and input
// staging.
constexpr int kMinGroupsPerComputeUnit = 2;

// How many chunks of chunk_len positions (the last may be shorter) cover positions 0..pos: what the
// kernels (attention.cl, token.cl) derive from chunk_len, and what decides the token kernel's barriers.
inline int attention_chunk_count(int pos, int chunk_len) { return (pos + chunk_len) / chunk_len; }

// The most chunks attention_chunks can split a head of this model into on any device: the bound the
// capacity plan counts for attention's per-chunk results.
int max_attention_chunks(const Config& config);

// The most positions a prefill batch holds (the whole prompt when it fits), never more than the context:
// on GPU shapes enough tiles of positions (kGemmTiles) to fill the device with every weight tile read once
// per batch; on CPU shapes fewer, so that the batch's inputs of a matrix stay in the cores' caches while a
// work-item's rows sweep them; on ordered shapes one, as they run a prompt a position at a time
// (KernelSet::prefill_possible) and need no batch buffers.
int prefill_batch_for(const LaunchShape& shape, const Config& config);
constexpr int kGpuPrefillBatch = 512, kCpuPrefillBatch = 64;

// A GPU-shape GEMM's work-group tile, rows by positions (GEMM_TR x GEMM_TP in gemm_gpu.cl).
struct GemmTile {
    int rows, positions;
    auto operator<=>(const GemmTile&) const = default;
};
// The tiles gemm_gpu.cl is built for, largest first: a larger tile reads local memory less per
// multiply-add, a smaller one splits a launch over more work-groups.
inline constexpr GemmTile kGemmTiles[] = {{128, 128}, {128, 64}, {64, 64}};
// The smallest, gemm_gpu.cl's default: the shape's own build holds it.
inline constexpr GemmTile kOwnGemmTile = {64, 64};
// Blocks of `block_rows` rows a product over matrices of `row_extents` rows takes (KernelSet::gemm).
int gemm_blocks(std::initializer_list<int> row_extents, int block_rows);
// What a product's tile must give the device (gemm_tile): work-groups for at least `share_percent` of
// its compute units, and, past one round of them (a work-group a compute unit), rounds at least
// `fill_percent` full on average (0: any).
struct GemmTileRule {
    int share_percent;
    int fill_percent;
};
// The tile for such a product of `positions` positions on a device of `compute_units`: the largest that
// keeps `rule`, else the one with the most work-groups.
GemmTile gemm_tile(std::initializer_list<int> row_extents, int positions, int compute_units, GemmTileRule rule);
// On tensor cores a larger tile moves fewer bytes per multiply-add, worth leaving a few compute units idle.
// The portable GEMM, bound by its SIMT multiply-adds, asks for every one, and for rounds that keep them
// busy: a last round about half empty (1B's qkv on 128 x 64 tiles) costs more than the smaller tile's
// extra loads.
constexpr GemmTileRule kTensorCoreTileRule = {70, 0};
constexpr GemmTileRule kPortableTileRule = {100, 80};

// The token greedy decoding's argmax writes where a position's logits hold NaN or an infinity
// (NON_FINITE_TOKEN in kernels/greedy.cl): never a token, and not the -1 of a token kernel that gave up.
inline constexpr int kNonFiniteToken = -2;

class KernelSet {
public:
    // Kernels for matrices of `weights`' format (and its QuantRule), normalizing with `norm_eps` (the
    // model's Config::norm_eps). `warp_shuffles` false builds every reduction through local memory even
    // where the device offers warp shuffles (tests: warp_shuffles() says the same bits either way).
    // `build_options` are added to every build (tests: -cl-kernel-arg-info). `precision` is the tensor-core
    // GEMMs' of float weights (PROMPT_FAST in gemm_gpu.cl); it changes nothing else. Builds nothing: each
    // program is compiled the first time one of its kernels is asked for (OnFirstUse).
    KernelSet(const Device& device, const LaunchShape& shape, const WeightFormat& weights = {},
              bool warp_shuffles = true, const std::string& build_options = "",
              TensorCores tensor_cores = TensorCores::where_present, float norm_eps = Config{}.norm_eps,
              PromptPrecision precision = PromptPrecision::exact);

    const LaunchShape& shape() const { return shape_; }
    // How the matrices lie in device memory for these kernels (WeightStaging writes them so).
    const DeviceWeightLayout& weight_layout() const { return layout_; }

    struct Range {
        cl::NDRange global, local;
    };

    // The matrix-vector kernels, by what they compute.
    enum class Matvec { attn_qkv_rope, matvec_residual, ffn_gate_up, classifier };  // indexes a Build
    struct Launch {
        cl::Kernel* kernel;
        Range range;
    };
    // The kernel and range for `rows` output rows (or row pairs) of `n` elements each, built for the
    // row's widened_row_threads and its dot_batch (each distinct pair is compiled once, when first needed).
    Launch matvec(Matvec which, int rows, int n);

    // Work-items for a kernel of the shape's own build computing `rows` output rows (or row pairs): a
    // work-group per work unit (a group's worth of rows) on GPU shapes; on CPU shapes at most
    // kCpuGroupsPerComputeUnit per compute unit (kCpuQ8GroupsPerComputeUnit for quantized weights, where
    // each group also quantizes the input), each taking a run of units: PoCL pays for each work-group it
    // schedules, and a group computes the norm's scale once for its run. Quantized on GPU shapes: at most
    // kGpuQ8GroupsPerComputeUnit per compute unit, each taking every so many units (units.cl), so that
    // fewer work-groups quantize the same input; f16: at most kGpuF16GroupsPerComputeUnit (as many as the
    // register cap lets run at once: kMatvecGroupsPerComputeUnit), so that fewer stage it.
    Range rows(int rows) const;
    static constexpr std::size_t kCpuGroupsPerComputeUnit = 8, kCpuQ8GroupsPerComputeUnit = 2,
                                 kGpuQ8GroupsPerComputeUnit = 2, kGpuF16GroupsPerComputeUnit = 4;
    // Work-items for attention over n_heads heads, each split into `chunks` chunks of positions.
    Range heads(int n_heads, int chunks = 1) const;
    // Chunks to split each head's `positions` cached positions into (see kernels/attention.cl): on GPU
    // shapes enough for two work-groups per compute unit, but at least kMinAttentionChunk keys'
    // elements (positions x head_size) per chunk on average (the last may be a little shorter) and at
    // most kMaxAttentionChunks chunks: a short chunk saves less than the combining step costs, and
    // combining costs more the more chunks there are (docs/benchmarks.md).
    // 1 where the kernels cannot combine chunks (without device_fences(): CPU shapes, which run a head per
    // work-item, and compilers without OpenCL C 2.0).
    // Whatever the above, where chunks are combined no chunk is longer than kScoreCapacity positions:
    // the kernels keep a chunk's scores in that many floats of local memory (SCORE_CAPACITY).
    int attention_chunks(int n_heads, int head_size, int positions) const;
    // The chunk length attention at position pos (pos + 1 cached positions) is given: attention_chunks
    // chunks of equal length but the last (the kernels count them with attention_chunk_count).
    int attention_chunk_len(int n_heads, int head_size, int pos) const;
    static constexpr int kMinAttentionChunk = 2048, kMaxAttentionChunks = 8, kScoreCapacity = 2048;
    // The two trailing arguments of the matrix-vector kernels: local memory for an input vector of n
    // elements (staged_bytes), and n itself when the work-group should stage the input there (GPU
    // shapes, and every shape for quantized weights, when it fits: staged_input_fits), else 0.
    int staged_count(int n) const;
    cl::LocalSpaceArg staged_space(int n) const;

    // Whether the final RMSNorm runs as its own kernel before the classifier reads its output (CPU
    // shapes, where each row would otherwise recompute it) or inside every classifier work-group (GPU
    // shapes, where that is cheaper than one more launch).
    bool separate_final_norm() const { return !shape_.gpu_family(); }

    // Work-groups of the first of greedy decoding's two argmax steps (and of its partial results): two
    // per compute unit, as many as the token kernel ever launches.
    int argmax_groups() const { return min_groups_; }
    // `count` work-groups of the shape's size.
    Range groups(int count) const;

    // The shape's own build (its row width, the long batch, no register cap): the kernels below, the
    // smallest GEMM tile's products and, where the matrix-vector builds go uncapped, those of its width.
    struct OwnBuild {
        cl::Program program;
        cl::Kernel attention, rmsnorm, argmax, argmax_embed;
        // Prefill's kernels (kernels/prefill.cl).
        cl::Kernel rmsnorm_rows, attention_rows;
        // Quantized builds' alone (kernels/prefill_quantized.cl): a GEMM's input quantized, and RoPE and
        // SwiGLU after its unfused products.
        cl::Kernel quantize_rows, rope_rows, swiglu;
        // Prefill's attention on GPU shapes (kernels/attention_tiles.cl), where attention_tiles_possible.
        cl::Kernel attention_tiles;
    };
    // Built the first time it is asked for: a run of the token kernel alone never builds it.
    OwnBuild& own() const { return own_(); }
    // Whether attention_tiles runs a model of this head size here: GPU shapes, heads of at most
    // kAttentionTilesHeadMax elements, its local memory within the device's and its work-groups whole.
    // Elsewhere prefill runs attention_rows, whose scores go to memory.
    bool attention_tiles_possible(int head_size) const;
    static constexpr int kAttentionTilesHeadMax = 128, kAttentionTilesQueries = 32;
    // attention_tiles' range for `positions` queries of n_heads heads, and its four local buffers
    // (queries, keys or values, scores, exchange) for heads of head_size.
    Range attention_tiles_range(int n_heads, int positions) const;
    std::array<cl::LocalSpaceArg, 4> attention_tiles_local(int head_size) const;
    // Prefill's products, by what becomes of their sums (prefill.cl's kernels of the same names).
    enum class Gemm { gemm, qkv_rope, gate_up };  // indexes GemmKernels
    // The kernel and range for a product of `positions` positions over matrices of `row_extents` rows (wq's,
    // wk's and wv's for qkv_rope; twice hidden_dim for gate_up, whose blocks take half their rows from w1
    // and half from w3), each matrix's rows divided into blocks of its own. CPU shapes: a work-item per
    // block of kGemmRows rows (gemm_cpu.cl), the shape's own build. GPU shapes: a work-group (the one its
    // kernels declare) per tile of rows by positions (gemm_gpu.cl), the tile chosen by gemm_tile
    // for the launch's size (or `tile`: tests), each tile's build compiled once, when first needed.
    // Quantized weights: Gemm::gemm alone (prefill_quantized.cl), of the shape's own build and its tile.
    Launch gemm(Gemm which, std::initializer_list<int> row_extents, int positions,
                std::optional<GemmTile> tile = std::nullopt);
    // Whether a GPU shape runs GEMM tile `tile` as asked: its build compiles here and its work-group fits
    // the device's registers and local memory. A launch of a tile it does not run takes the smallest
    // tile's build instead (prefill_possible requires that one).
    bool gemm_tile_runs(GemmTile tile);
    static constexpr int kGemmRows = 4;
    // Whether the GEMMs can run here for this model: GPU shapes need the smallest tile's work-group, and
    // matrices and batches of fewer than 2^32 elements (gemm_gpu.cl's offsets).
    bool prefill_possible(const Config& config) const;
    // One work-item per (element, position) of a step over `width` elements of each position.
    Range per_position(int width, int positions) const;

    // Whether the programs are built with fences of device scope (DEVICE_FENCES in grid_sync.cl): GPU shapes
    // on a device of OpenCL 2.0 or later. CPU shapes are built as OpenCL C 1.2.
    bool device_fences() const { return standard_ != "CL1.2"; }
    // Whether attention may split a head into chunks, keeping a chunk's scores in local memory
    // (CHUNKED_ATTENTION in attention.cl): builds with device fences, but for ordered shapes, whose
    // softmax adds a head's every position in order (their scores go to `att`).
    bool chunked_attention() const { return device_fences() && !shape_.ordered; }
    // Whether the reductions combine a warp's values by shuffles (WARP_SHUFFLE in reductions.cl): GPU shapes
    // of whole warps on a device with 32-wide warps whose compiler takes PTX (NVIDIA's).
    bool warp_shuffles() const { return warp_shuffles_; }
    // Whether exp() is glibc's expf bit for bit (GLIBC_EXPF in kernels/expf.cl): exact shapes on a device
    // with doubles.
    bool glibc_expf() const { return shape_.exact() && device_.info().fp64; }
    // Whether prefill's GEMMs run on tensor cores (GEMM_MMA in gemm_gpu.cl and prefill_quantized.cl): GPU shapes
    // with warp shuffles (the compiler takes inline PTX) on a GPU of compute capability 8.0 or later (TF32
    // and int8 mma.sync), for float weights and Q8_0 in groups of a multiple of kQ8MmaStep, unless asked
    // never to; or emulated.
    bool tensor_cores() const { return tensor_cores_; }
    // The precision prefill's GEMMs run at: fast only where asked and it takes effect (tensor cores, a GPU
    // shape, float weights); else exact.
    PromptPrecision prompt_precision() const { return prompt_precision_; }

    // The program holding the token kernel (kernels/token.cl, token_cpu.cl) for a model, `model_options`
    // giving its shape as -D options (and any option of the device's own compiler), dim and hidden_dim
    // the model's. Throws Error where the compiler takes no OpenCL C 2.0 or later (GPU shapes: without
    // device_fences()), which its grid barriers need.
    cl::Program token_program(const std::string& model_options, int dim, int hidden_dim) const;

private:
    // The matrix-vector kernels of one program build, indexed by Matvec.
    using Build = std::array<cl::Kernel, 4>;
    static Build matvec_kernels(const cl::Program& program);
    OwnBuild build_own() const;
    cl::Program build_program(int row_threads, int dot_batch, const std::string& extra) const;
    cl::Program build_program(int row_threads, int dot_batch, const std::string& extra,
                              const std::string& standard) const;
    // The build in the device's OpenCL C with memory scopes (DeviceInfo::scopes_standard); Error on an
    // OpenCL 1.x device, which has none.
    cl::Program build_with_scopes(int row_threads, int dot_batch, const std::string& extra) const;
    Range rows(int rows, int row_threads) const;

    // The compute capability of NVIDIA's first GPUs with TF32 and m16n8k32 int8 tensor cores (Ampere).
    static constexpr int kTf32ComputeCapability = 80;
    // The weights of k an int8 mma.sync takes (m16n8k32): Q8_0's groups hold a whole number of them.
    static constexpr int kQ8MmaStep = 32;
    // The token kernel's work-items per row (token_program).
    static constexpr int kTokenRowThreads = 32;
    // Work-groups per compute unit the per-op matrix-vector builds (GPU shapes) cap their registers for
    // (register_cap_option): 64 registers for work-groups of 256. Attention and the other kernels keep
    // theirs: capping them costs more than it gains.
    static constexpr int kMatvecGroupsPerComputeUnit = 4;

    Device device_;
    LaunchShape shape_;  // the shape asked for, as the weights run it (shape_for)
    DeviceWeightLayout layout_;
    bool inline_ptx_;  // builds take inline PTX (NVIDIA's compiler)
    // Every build's: the weight layout, the norm's epsilon, correctly rounded division and sqrt, the caller's.
    std::string common_options_;
    std::string standard_;  // "-cl-std=" of every build
    bool warp_shuffles_;
    bool tensor_cores_;
    PromptPrecision prompt_precision_;
    std::string matvec_options_;  // the matrix-vector builds' register cap
    int min_groups_;  // a launch wants at least this many work-groups
    std::size_t compute_units_;
    // Prefill's products of one build, indexed by Gemm, and the tile they compute (GPU shapes).
    using GemmKernels = std::array<cl::Kernel, 3>;
    // (Quantized builds: gemm alone.)
    GemmKernels gemm_kernels(const cl::Program& program) const;
    struct GemmBuild {
        GemmTile tile;
        GemmKernels kernels;
        // GPU shapes: the work-group its kernels declare (gemm_gpu.cl's GEMM_KERNEL), rows by positions.
        std::size_t group_rows = 0, group_positions = 0;
    };
    // `program`'s GEMM kernels, built for `tile`, with the work-group they declare.
    GemmBuild gemm_build_of(GemmTile tile, const cl::Program& program) const;
    // Whether the device launches the work-group `build`'s kernels declare, its local memory within the
    // device's.
    bool fits(const GemmBuild& build) const;
    // The build a launch of `tile` takes: the tile's own, or the smallest one's (gemm_tile_runs).
    GemmBuild gemm_build(GemmTile tile) const;
    // The matrix-vector kernels of a width and batch: the own build's where it holds them, else a build of
    // their own.
    Build matvec_build(std::pair<int, int> threads_and_batch) const;

    // The programs, each built when a launch first needs one of its kernels (the token kernel's is built
    // by TokenKernel::create, which only a run of it calls).
    OnFirstUse<OwnBuild> own_{[this](std::monostate) { return build_own(); }};
    // By (work-items per row, dot batch).
    OnFirstUse<Build, std::pair<int, int>> matvec_builds_{
        [this](std::pair<int, int> threads_and_batch) { return matvec_build(threads_and_batch); }};
    // By the tile asked for: the shape's own build (CPU shapes; the smallest tile of GPU shapes), and the
    // others.
    OnFirstUse<GemmBuild, GemmTile> gemm_builds_{[this](GemmTile tile) { return gemm_build(tile); }};
};

}  // namespace llamacl
