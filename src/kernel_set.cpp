#include "llamacl/kernel_set.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include "llamacl/error.hpp"
#include "llamacl/vector_expf.hpp"

namespace llamacl {

namespace {

// The exact shape's exponential is the host's (kernels/expf.cl): glibc's expf, in the build this
// process runs, with its table.
std::string glibc_expf_option() {
    std::string table;
    for (const std::uint64_t entry : kGlibcExp2Table) {
        char hex[24];
        std::snprintf(hex, sizeof hex, "%s0x%016llxUL", table.empty() ? "" : ",",
                      static_cast<unsigned long long>(entry));
        table += hex;
    }
    return std::string(" -DGLIBC_EXPF -DGLIBC_EXP2_TABLE=") + table + (glibc_expf_fused() ? " -DGLIBC_EXPF_FMA" : "");
}

// RMSNorm's epsilon as an exact hex float literal (reductions.cl's NORM_EPS).
std::string norm_eps_option(float eps) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "%a", static_cast<double>(eps));
    return std::string(" -DNORM_EPS=") + hex + "f";
}

std::size_t round_up(std::size_t v, std::size_t multiple) { return (v + multiple - 1) / multiple * multiple; }

Error no_memory_scopes(const DeviceInfo& device) {
    return Error(device.name + " reports " + device.version + ": no OpenCL C 2.0 memory scopes, which the token "
                 "kernel's grid barrier needs (OpenCL 2.0 or later)");
}

}  // namespace

std::string register_cap_option(const DeviceInfo& device, int groups, int local) {
    // 255 is the most registers a work-item can have on NVIDIA's GPUs: a cap at or above it limits nothing.
    constexpr std::uint32_t kMinCap = 64, kMaxRegisters = 255;
    if (!device.register_cap_option || groups <= 0 || local <= 0) return "";
    const std::uint32_t cap = device.registers_per_group / static_cast<std::uint32_t>(groups * local);
    return cap >= kMinCap && cap < kMaxRegisters ? " -cl-nv-maxrregcount=" + std::to_string(cap) : "";
}

int widened_row_threads(const LaunchShape& shape, int rows, int n, int min_groups) {
    int threads = shape.row_threads;
    if (!shape.gpu_family()) return threads;  // CPU shapes: a work-item owns its row
    const auto groups = [&](int t) { return (rows + shape.local_size / t - 1) / (shape.local_size / t); };
    while (groups(threads) < min_groups && threads * 2 <= shape.local_size && threads * 2 <= n / 4) threads *= 2;
    return threads;
}

int dot_batch(int n, int row_threads) {
    return row_threads == 1 || n / row_threads >= kLongDotBatch ? kLongDotBatch : kShortDotBatch;
}

int token_dot_batch(int longest_row, int dim, int row_threads) {
    const int dim_share = (dim + row_threads - 1) / row_threads;
    return std::max(dot_batch(longest_row, row_threads), dim_share <= kLongDotBatch ? dim_share : 0);
}

std::uint64_t staged_input_bytes(const WeightFormat& weights, int n) {
    const std::uint64_t bytes = weights.quantized() ? weights.input().bytes(static_cast<std::uint64_t>(n))
                                                                 : static_cast<std::uint64_t>(n) * sizeof(float);
    return round_up(bytes, sizeof(float));
}

std::uint64_t staged_bytes(const LaunchShape& shape, const WeightFormat& weights, int n) {
    if (!shape.ordered || !weights.quantized()) return staged_input_bytes(weights, n);
    // Two rows' terms (row_pair) per row of the work-group, each row's an odd number of floats.
    const std::uint64_t rows = static_cast<std::uint64_t>(shape.local_size / shape.row_threads);
    const std::uint64_t stride = static_cast<std::uint64_t>(n / weights.group_size) | 1;
    return staged_input_bytes(weights, n) + 2 * rows * stride * sizeof(float);
}

bool staged_input_fits(const DeviceInfo& device, const LaunchShape& shape, const WeightFormat& weights, int n) {
    return staged_bytes(shape, weights, n) + static_cast<std::uint64_t>(shape.local_size) * sizeof(float) + 1024 <=
           device.local_mem_bytes;
}

KernelSet::KernelSet(const Device& device, const LaunchShape& shape, const WeightFormat& weights,
                     bool warp_shuffles, const std::string& build_options, TensorCores tensor_cores, float norm_eps,
                     PromptPrecision precision)
    : device_(device),
      shape_(shape_for(shape, weights)),
      layout_(DeviceWeightLayout::for_family(weights, shape_.gpu_family())),
      // NVIDIA's compiler (which reports its warp width: cl_nv_device_attribute_query) takes inline PTX.
      inline_ptx_(device.info().warp_size == 32 && shape_.gpu_family()),
      common_options_(layout_.build_options() + norm_eps_option(norm_eps) + (inline_ptx_ ? " -DINLINE_PTX" : "")),
      // CPU shapes stay with OpenCL C 1.2: they split no work that would need fences, and the "exact" shape's
      // arithmetic is run.c's as that standard compiles it. GPU shapes use memory scopes where the device
      // has them.
      standard_(shape_.gpu_family() && !device.info().scopes_standard.empty() ? device.info().scopes_standard
                                                                              : "CL1.2"),
      // NVIDIA reports its warp width (cl_nv_device_attribute_query), and its compiler takes inline PTX.
      warp_shuffles_(warp_shuffles && device.info().warp_size == 32 && shape_.gpu_family() &&
                     shape_.local_size % 32 == 0),
      // (The quantized formats' int8 products step through k 32 weights at a time, within a group.)
      // (Ordered shapes add in run.c's order, which no tensor core keeps.)
      tensor_cores_(!shape_.ordered && (!weights.quantized() || weights.group_size % kQ8MmaStep == 0) &&
                    (tensor_cores == TensorCores::emulated ||
                     (tensor_cores == TensorCores::where_present && warp_shuffles_ &&
                      device.info().compute_capability >= kTf32ComputeCapability))),
      // (Without tensor cores, on CPU shapes and for integer formats, fast has nothing to change.)
      prompt_precision_(tensor_cores_ && shape_.gpu_family() && !weights.quantized() ? precision
                                                                                     : PromptPrecision::exact),
      min_groups_(kMinGroupsPerComputeUnit * static_cast<int>(device.info().compute_units)),
      compute_units_(device.info().compute_units) {
    // run.c's 1/sqrtf and divisions are correctly rounded; ask for the same where the device offers it.
    const cl_device_fp_config fp = device.device().getInfo<CL_DEVICE_SINGLE_FP_CONFIG>();
    if (fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) common_options_ += " -cl-fp32-correctly-rounded-divide-sqrt";
    if (glibc_expf()) common_options_ += glibc_expf_option();
    common_options_ += " -DLOCAL_MEM_BYTES=" + std::to_string(device.info().local_mem_bytes) +
                       " -DNON_FINITE_TOKEN=(" + std::to_string(kNonFiniteToken) + ")";
    if (tensor_cores_) common_options_ += tensor_cores == TensorCores::emulated ? " -DGEMM_MMA -DMMA_EMULATE" : " -DGEMM_MMA";
    if (prompt_precision_ == PromptPrecision::fast) common_options_ += " -DPROMPT_FAST";
    if (shape_.ordered) common_options_ += " -DORDERED_SUMS";
    if (!build_options.empty()) common_options_ += " " + build_options;
    if (shape_.gpu_family())
        matvec_options_ = register_cap_option(device.info(), kMatvecGroupsPerComputeUnit, shape_.local_size);
}

KernelSet::OwnBuild KernelSet::build_own() const {
    OwnBuild own;
    own.program = build_program(shape_.row_threads, kLongDotBatch, "");
    const cl::Program& program = own.program;
    own.attention = cl::Kernel(program, "attention");
    own.rmsnorm = cl::Kernel(program, "rmsnorm");
    own.argmax = cl::Kernel(program, "argmax");
    own.argmax_embed = cl::Kernel(program, "argmax_embed");
    own.rmsnorm_rows = cl::Kernel(program, "rmsnorm_rows");
    own.attention_rows = cl::Kernel(program, "attention_rows");
    if (shape_.gpu_family()) own.attention_tiles = cl::Kernel(program, "attention_tiles");
    if (layout_.format.quantized()) {
        own.quantize_rows = cl::Kernel(program, "quantize_rows");
        own.rope_rows = cl::Kernel(program, "rope_rows");
        own.swiglu = cl::Kernel(program, "swiglu");
    }
    return own;
}

// In Gemm's order.
KernelSet::GemmKernels KernelSet::gemm_kernels(const cl::Program& program) const {
    if (layout_.format.quantized()) return {cl::Kernel(program, "gemm")};
    return {cl::Kernel(program, "gemm"), cl::Kernel(program, "gemm_qkv_rope"), cl::Kernel(program, "gemm_gate_up")};
}

KernelSet::GemmBuild KernelSet::gemm_build_of(GemmTile tile, const cl::Program& program) const {
    GemmBuild build{tile, gemm_kernels(program)};
    const auto declared = build.kernels[0].getWorkGroupInfo<CL_KERNEL_COMPILE_WORK_GROUP_SIZE>(device_.device());
    build.group_rows = declared[0];
    build.group_positions = declared[1];
    return build;
}

// In Matvec's order.
KernelSet::Build KernelSet::matvec_kernels(const cl::Program& program) {
    return {cl::Kernel(program, "attn_qkv_rope"), cl::Kernel(program, "matvec_residual"),
            cl::Kernel(program, "ffn_gate_up"), cl::Kernel(program, "classifier")};
}

cl::Program KernelSet::build_program(int row_threads, int dot_batch, const std::string& extra) const {
    return build_program(row_threads, dot_batch, extra, standard_);
}

cl::Program KernelSet::build_program(int row_threads, int dot_batch, const std::string& extra,
                                     const std::string& standard) const {
    return device_.build_program("-DROW_THREADS=" + std::to_string(row_threads) + " -DLOCAL=" +
                                     std::to_string(shape_.local_size) + " -DVECTOR_WIDTH=" +
                                     std::to_string(shape_.vector_width) + " -DDOT_BATCH=" + std::to_string(dot_batch) +
                                     " -DSCORE_CAPACITY=" + std::to_string(kScoreCapacity) +
                                     " -DGEMM_ROWS=" + std::to_string(kGemmRows) +
                                     (standard != "CL1.2" ? " -DDEVICE_FENCES" : "") +
                                     (warp_shuffles_ ? " -DWARP_SHUFFLE" : "") + common_options_ + extra,
                                 standard);
}

cl::Program KernelSet::build_with_scopes(int row_threads, int dot_batch, const std::string& extra) const {
    const std::string& scopes = device_.info().scopes_standard;
    if (scopes.empty()) throw no_memory_scopes(device_.info());
    return build_program(row_threads, dot_batch, extra, scopes);
}

cl::Program KernelSet::token_program(const std::string& model_options, int dim, int hidden_dim) const {
    if (!shape_.gpu_family()) {
        // CPU shapes: their own build is OpenCL C 1.2 (first_build); the token kernel's needs the scopes of
        // its grid barrier, and its steps are the per-op kernels' (one work-item a row, no batch).
        return build_with_scopes(shape_.row_threads, kLongDotBatch, " -DTOKEN_KERNEL" + model_options);
    }
    if (!device_fences()) throw no_memory_scopes(device_.info());
    // One build serves every step, so one row width and one batch: 32 work-items per row and the batch
    // of the longest rows (w2's; docs/benchmarks.md). But no shorter than a row of
    // dim elements takes a work-item, up to the long batch: a unit issues its first batch before the step's
    // input is staged (dot.cl), and a row of the steps that read x then needs no trip to memory after
    // it. (A longer batch would hold more registers across the staging than the cap leaves.)
    // The batch counts loads: f16 halves go in pairs where PTX widens them and every row is whole pairs
    // from its start (weights.cl's TOKEN_HALF_PAIRS), else one at a time.
    const bool half_pairs =
        layout_.format.type == ElementType::f16 && inline_ptx_ && dim % 2 == 0 && hidden_dim % 2 == 0;
    const int span = half_pairs ? layout_.span() : 1;
    const int threads = std::min(kTokenRowThreads, shape_.local_size);
    return build_program(threads, token_dot_batch(std::max(dim, hidden_dim) / span, dim / span, threads),
                         " -DTOKEN_KERNEL -DFEW_GROUPS" + std::string(half_pairs ? " -DTOKEN_HALF_PAIRS" : "") +
                             model_options);
}

KernelSet::Launch KernelSet::matvec(Matvec which, int rows, int n) {
    // Quantized rows are dealt to their lanes a group at a time: widened no further than a group per lane, and
    // one build per width (DOT_BATCH is the float formats' row products').
    const WeightFormat& format = layout_.format;
    const int lane_elements = format.quantized() ? 4 * (n / format.group_size) : n;
    const int threads = widened_row_threads(shape_, rows, lane_elements, min_groups_);
    const int batch = format.quantized() ? kLongDotBatch : dot_batch(n / layout_.span(), threads);
    return {&matvec_builds_({threads, batch})[static_cast<std::size_t>(which)], this->rows(rows, threads)};
}

KernelSet::Build KernelSet::matvec_build(std::pair<int, int> threads_and_batch) const {
    const auto [threads, batch] = threads_and_batch;
    // The own build's serve, unless the matrix-vector kernels are built with a register cap it goes without.
    if (threads == shape_.row_threads && batch == kLongDotBatch && matvec_options_.empty())
        return matvec_kernels(own().program);
    return matvec_kernels(build_program(threads, batch, matvec_options_));
}

KernelSet::Range KernelSet::rows(int rows) const { return this->rows(rows, shape_.row_threads); }

KernelSet::Range KernelSet::rows(int rows, int row_threads) const {
    const std::size_t local = static_cast<std::size_t>(shape_.local_size);
    const std::size_t rows_per_group = local / static_cast<std::size_t>(row_threads);
    std::size_t groups = (static_cast<std::size_t>(rows) + rows_per_group - 1) / rows_per_group;
    // A few work-groups per compute unit, each taking its share of the units (FOR_GROUP_UNITS in units.cl),
    // on CPU shapes; on GPU shapes only for the quantized formats and f16.
    const ElementType type = layout_.format.type;
    const bool quantized = layout_.format.quantized();
    if (!shape_.gpu_family())
        groups = std::min(groups, (quantized ? kCpuQ8GroupsPerComputeUnit : kCpuGroupsPerComputeUnit) * compute_units_);
    else if (quantized)
        groups = std::min(groups, kGpuQ8GroupsPerComputeUnit * compute_units_);
    else if (type == ElementType::f16)
        groups = std::min(groups, kGpuF16GroupsPerComputeUnit * compute_units_);
    return {cl::NDRange(groups * local), cl::NDRange(local)};
}

int prefill_batch_for(const LaunchShape& shape, const Config& config) {
    if (shape.ordered) return 1;
    return std::min(shape.gpu_family() ? kGpuPrefillBatch : kCpuPrefillBatch, config.seq_len);
}

bool KernelSet::fits(const GemmBuild& build) const {
    const cl::Kernel& kernel = build.kernels[0];
    return kernel.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(device_.device()) >=
               build.group_rows * build.group_positions &&
           kernel.getWorkGroupInfo<CL_KERNEL_LOCAL_MEM_SIZE>(device_.device()) <= device_.info().local_mem_bytes;
}

bool KernelSet::prefill_possible(const Config& c) const {
    if (!shape_.gpu_family()) return true;
    if (shape_.ordered) return false;  // (prompts run a position at a time: the GEMMs' sums are not run.c's)
    const std::uint64_t widest = std::max(c.dim, c.hidden_dim);
    const std::uint64_t elements = widest * std::max<std::uint64_t>(widest, prefill_batch_for(shape_, c));
    return elements < (std::uint64_t{1} << 32) && fits(gemm_builds_(kOwnGemmTile));
}

namespace {

// attention_tiles' work-items (ATT_QUERIES x ATT_LANES), keys per tile and local floats for heads of
// head_size: the queries and a tile of keys or values in rows of head_size rounded up to odd, the
// scores, one float per work-item to exchange.
constexpr int kAttentionTilesItems = 256, kAttentionTilesKeys = 32;
std::array<std::size_t, 4> attention_tiles_floats(int head_size) {
    const std::size_t stride = static_cast<std::size_t>(head_size | 1);
    return {KernelSet::kAttentionTilesQueries * stride, kAttentionTilesKeys * stride,
            static_cast<std::size_t>(KernelSet::kAttentionTilesQueries) * (kAttentionTilesKeys + 1),
            kAttentionTilesItems};
}

}  // namespace

bool KernelSet::attention_tiles_possible(int head_size) const {
    if (!shape_.gpu_family() || head_size > kAttentionTilesHeadMax) return false;
    std::size_t bytes = 0;
    for (std::size_t floats : attention_tiles_floats(head_size)) bytes += floats * sizeof(float);
    // (The reductions' scratch and what the compiler keeps in local memory itself leave room: staged_count.)
    return bytes + 1024 <= device_.info().local_mem_bytes &&
           own().attention_tiles.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(device_.device()) >= kAttentionTilesItems;
}

KernelSet::Range KernelSet::attention_tiles_range(int n_heads, int positions) const {
    // A work-group takes two blocks (attention_tiles.cl), the middle one alone.
    const std::size_t blocks = static_cast<std::size_t>((positions + kAttentionTilesQueries - 1) / kAttentionTilesQueries);
    const std::size_t pairs = (blocks + 1) / 2;
    return {cl::NDRange(pairs * kAttentionTilesItems, static_cast<std::size_t>(n_heads)), cl::NDRange(kAttentionTilesItems, 1)};
}

std::array<cl::LocalSpaceArg, 4> KernelSet::attention_tiles_local(int head_size) const {
    const auto floats = attention_tiles_floats(head_size);
    return {cl::Local(floats[0] * sizeof(float)), cl::Local(floats[1] * sizeof(float)),
            cl::Local(floats[2] * sizeof(float)), cl::Local(floats[3] * sizeof(float))};
}

int gemm_blocks(std::initializer_list<int> row_extents, int block_rows) {
    int blocks = 0;
    for (int rows : row_extents) blocks += (rows + block_rows - 1) / block_rows;
    return blocks;
}

GemmTile gemm_tile(std::initializer_list<int> row_extents, int positions, int compute_units, GemmTileRule rule) {
    const auto groups = [&](const GemmTile& t) {
        return static_cast<std::int64_t>(gemm_blocks(row_extents, t.rows)) * ((positions + t.positions - 1) / t.positions);
    };
    const std::int64_t units = compute_units;
    const GemmTile* most = &kGemmTiles[0];
    for (const GemmTile& t : kGemmTiles) {
        const std::int64_t n = groups(t), rounds = (n + units - 1) / units;
        if (n * 100 >= units * rule.share_percent && (rounds < 2 || n * 100 >= rounds * units * rule.fill_percent))
            return t;
        if (n > groups(*most)) most = &t;
    }
    return *most;
}

KernelSet::Launch KernelSet::gemm(Gemm which, std::initializer_list<int> row_extents, int positions,
                                  std::optional<GemmTile> tile_asked) {
    const auto index = static_cast<std::size_t>(which);
    const bool quantized = layout_.format.quantized();
    if (quantized && which != Gemm::gemm) throw std::logic_error("quantized weights have no fused prefill products");
    if (!shape_.gpu_family())
        return {&gemm_builds_(kOwnGemmTile).kernels[index], rows(gemm_blocks(row_extents, kGemmRows), 1)};
    const GemmTile wanted =
        quantized && !tensor_cores_ ? kOwnGemmTile  // (prefill_quantized.cl's portable tile)
        : tile_asked                ? *tile_asked
                                    : gemm_tile(row_extents, positions, static_cast<int>(compute_units_),
                                                tensor_cores_ ? kTensorCoreTileRule : kPortableTileRule);
    GemmBuild& build = gemm_builds_(wanted);
    const std::size_t blocks = static_cast<std::size_t>(gemm_blocks(row_extents, build.tile.rows));
    const std::size_t position_tiles =
        static_cast<std::size_t>((positions + build.tile.positions - 1) / build.tile.positions);
    return {&build.kernels[index], {cl::NDRange(blocks * build.group_rows, position_tiles * build.group_positions),
                                     cl::NDRange(build.group_rows, build.group_positions)}};
}

KernelSet::GemmBuild KernelSet::gemm_build(GemmTile tile) const {
    // The smallest tile is the shape's own build's (gemm_gpu.cl's default), as is the CPU shapes' GEMM.
    if (tile == kOwnGemmTile) return gemm_build_of(tile, own().program);
    // A device with less local memory than a large tile takes (some GPUs have 32 KiB) may refuse its build
    // or its launch, and one with fewer registers its whole work-group: that tile runs as the smallest.
    std::optional<GemmBuild> build;
    try {
        build = gemm_build_of(tile, build_program(shape_.row_threads, kLongDotBatch,
                                                  " -DGEMM_TR=" + std::to_string(tile.rows) +
                                                      " -DGEMM_TP=" + std::to_string(tile.positions)));
    } catch (const Error&) {
        // (The compiler's refusal: the smallest tile instead, below.)
    }
    return build && fits(*build) ? *build : gemm_builds_(kOwnGemmTile);
}

bool KernelSet::gemm_tile_runs(GemmTile tile) {
    if (!shape_.gpu_family()) return false;
    const GemmBuild& build = gemm_builds_(tile);
    return build.tile == tile && fits(build);  // (the smallest tile's build is not checked when it is made)
}

KernelSet::Range KernelSet::per_position(int width, int positions) const {
    const std::size_t local = static_cast<std::size_t>(shape_.local_size);
    return {cl::NDRange(round_up(static_cast<std::size_t>(width), local), static_cast<std::size_t>(positions)),
            cl::NDRange(local, 1)};
}

KernelSet::Range KernelSet::groups(int count) const {
    const std::size_t local = static_cast<std::size_t>(shape_.local_size);
    return {cl::NDRange(static_cast<std::size_t>(count) * local), cl::NDRange(local)};
}

KernelSet::Range KernelSet::heads(int n_heads, int chunks) const {
    const std::size_t local = static_cast<std::size_t>(shape_.local_size);
    // CPU shape: a work-item per head; GPU shape: a work-group per (head, chunk).
    if (!shape_.gpu_family()) return {cl::NDRange(round_up(static_cast<std::size_t>(n_heads), local)), cl::NDRange(local)};
    return {cl::NDRange(static_cast<std::size_t>(n_heads) * static_cast<std::size_t>(chunks) * local), cl::NDRange(local)};
}

namespace {

// The most chunks `positions` cached positions of a head may be split into: each keeps at least
// kMinAttentionChunk keys' elements, and there are at most kMaxAttentionChunks.
int longest_split(int positions, int head_size) {
    const std::int64_t elements = static_cast<std::int64_t>(positions) * head_size;
    return static_cast<int>(std::clamp<std::int64_t>(elements / KernelSet::kMinAttentionChunk, 1,
                                                     KernelSet::kMaxAttentionChunks));
}

// The fewest chunks whose scores fit the kernel's local memory (kScoreCapacity positions each).
int fewest_chunks(int positions) {
    return static_cast<int>((static_cast<std::int64_t>(positions) + KernelSet::kScoreCapacity - 1) /
                            KernelSet::kScoreCapacity);
}

}  // namespace

int KernelSet::attention_chunks(int n_heads, int head_size, int positions) const {
    if (!chunked_attention()) return 1;  // no work-group could combine the chunks (CPU shapes, OpenCL C 1.2)
    const int wanted = (min_groups_ + n_heads - 1) / n_heads;
    return std::max(std::min(wanted, longest_split(positions, head_size)), fewest_chunks(positions));
}

int KernelSet::attention_chunk_len(int n_heads, int head_size, int pos) const {
    const int wanted = attention_chunks(n_heads, head_size, pos + 1);
    return static_cast<int>((static_cast<std::int64_t>(pos) + wanted) / wanted);
}

int max_attention_chunks(const Config& c) {
    return std::max(longest_split(c.seq_len, c.head_size()), fewest_chunks(c.seq_len));
}

int KernelSet::staged_count(int n) const {
    // CPU shapes read float inputs straight from memory.
    if (!shape_.gpu_family() && !layout_.format.quantized()) return 0;
    return staged_input_fits(device_.info(), shape_, layout_.format, n) ? n : 0;
}

cl::LocalSpaceArg KernelSet::staged_space(int n) const {
    return cl::Local(staged_count(n) > 0 ? static_cast<std::size_t>(staged_bytes(shape_, layout_.format, n))
                                         : sizeof(float));
}

}  // namespace llamacl

