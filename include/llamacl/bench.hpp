#pragma once
// The measurement behind `llama-cl bench`: how fast decode runs on a device, and how close that is to
// what the device's memory allows. One run measures the device's copy bandwidth (bandwidth_probes.hpp),
// pinned host-to-device bandwidth when weights stream, decode tokens/s, and from the runtime's own
// counters the enqueues and host waits per token, into a BenchResult (bench_report.hpp prints it). Bytes
// per token are a definition (token_traffic below, docs/benchmarks.md), so achieved GB/s and its share
// of the copy bandwidth (the roofline) follow from the measured tokens/s.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llamacl/bandwidth_probes.hpp"
#include "llamacl/capacity_plan.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"
#include "llamacl/device_options.hpp"
#include "llamacl/kernel_set.hpp"

namespace llamacl {

// The bytes one decode token reads on the device, with its position in [first_pos, first_pos + tokens).
// Everything else a token touches (one embedding row uploaded, the RoPE row, activations, the one K and V
// row written, the logits read back) is smaller by orders of magnitude and not counted.
struct TokenTraffic {
    std::uint64_t layer_weight_bytes = 0;  // every tensor of every layer (ModelSize::layer_bytes x n_layers)
    std::uint64_t classifier_bytes = 0;    // final RMSNorm + vocab x dim classifier; 0 with --finalize=cpu
    std::uint64_t kv_read_bytes = 0;       // K and V of positions 0..pos, every layer: mean over the timed tokens
    std::uint64_t total() const { return layer_weight_bytes + classifier_bytes + kv_read_bytes; }
};
TokenTraffic token_traffic(const Config& config, Finalize finalize, int first_pos, int tokens);

// The same bytes split by the runtime's command names (LaunchRecord::name): the kernels' shares sum to
// token_traffic().total(). The embedding upload and the result read-back get their own transfer sizes.
// 0 for a name the runtime does not use.
std::uint64_t command_bytes_per_token(const std::string& name, const Config& config, Finalize finalize,
                                      int first_pos, int tokens);
// The floating-point operations of a command per token, by the same names: 2 per multiply-add of the
// matrix-vector products and of attention's dot products (norms, RoPE, softmax and SwiGLU are a few per
// element of an activation, and not counted). forward_token's is the sum; 0 for a command without those.
std::uint64_t command_flops_per_token(const std::string& name, const Config& config, Finalize finalize,
                                      int first_pos, int tokens);

// A prefill command's (LaunchRecord::name) bytes and flops per prompt position, for a prefill of `prompt`
// positions in batches of `batch`, counted as prefill_bytes() and prefill_flops() count the whole: the
// kernels' shares sum to those over `prompt`. The embeddings' upload and the logits' read-back get their
// transfer sizes; 0 for a name the prefill does not use.
double prefill_command_bytes(const std::string& name, const Config& config, int prompt, int batch);
double prefill_command_flops(const std::string& name, const Config& config, int prompt);
// Whether a command is one of the prefill's matrix-matrix products (gemm_qkv_rope, gemm(wo), ...).
bool is_gemm_command(const std::string& name);

// The flops of a prefill of `prompt` positions from position 0: every layer's matrices for each position
// (a multiply-add is two), attention's scores and weighted sums over positions 0..p (4 x dim x (p + 1) per
// position and layer), and the classifier once, for the last position.
double prefill_flops(const Config& config, int prompt);
// The device-memory bytes of that prefill in batches of `batch` positions, counted as token_traffic
// counts a token's: every layer's weights once per batch, the classifier's once, and attention's K and V
// rows (positions 0..p for each p).
double prefill_bytes(const Config& config, int prompt, int batch);
// The instruction prefill's GEMMs issue on tensor cores for `weights`' format: int8 for the quantized
// formats, TF32 else.
MmaOperands tensor_core_operands(ElementType weights);
// The tensor cores' products a multiply-add of prefill's GEMMs takes for `weights`' format at `precision`
// (kernels/tensor_cores.cl): exact takes 3 TF32 ones for f32, 2 for f16 (a half is a TF32 value); fast one
// TF32 for both; one int8 for Q8_0 and Q4_0 at either.
int tensor_core_products(ElementType weights, PromptPrecision precision = PromptPrecision::exact);
// Those products by name: "3xTF32", "2xTF32", "1xTF32" or "int8".
std::string tensor_core_name(ElementType weights, PromptPrecision precision = PromptPrecision::exact);

struct BenchOptions {
    int prompt = 0;            // --prompt: positions of a prefill timed per run (0: none)
    int tokens = 32;           // N: decode tokens timed per run
    int context = 0;           // positions run untimed first; clamped so that context + tokens <= seq_len
    int runs = 3;              // timed runs of N tokens; tokens/s is their median
    DeviceOptions device;      // layers per offload, finalize, work shape, memory limit
    std::uint64_t probe_bytes = 0;  // bandwidth probe buffer size; 0: default_probe_bytes(), fitted (probe_bytes_for)
    int probe_reps = 5;
    bool profile = false;      // per-command table from event timestamps; needs a profiling queue
};

// One row of the --profile table: every command of that name over the timed tokens.
struct CommandProfile {
    std::string name;
    double count_per_token = 0;
    double ms_per_token = 0;    // summed event durations (end - start) per token
    double share_pct = 0;       // of the token's wall time
    double bytes_per_token = 0;  // command_bytes_per_token() (a prompt's: prefill_command_bytes())
    double gbs = 0;              // bytes_per_token over ms_per_token
    double flops_per_token = 0;  // command_flops_per_token() (prefill_command_flops())
    double gflops = 0;           // flops_per_token over ms_per_token
};

struct BenchResult {
    DeviceInfo device;
    std::string model;   // checkpoint path, or "synthetic:PRESET"
    Config config;
    CapacityPlan plan;
    LaunchShape shape;
    bool host_mirror = false;  // streaming from a pinned mirror (weight_staging.hpp)
    std::string schedule;       // "token" or "per-op" (device_forward.hpp)
    std::string per_op_reason;  // why not the token kernel (empty with it)
    int token_groups = 0;       // the token kernel's work-groups per launch (0: per-op)
    std::string argmax;         // "device" (greedy decoding on the device, device_forward.hpp) or "host"
    Finalize finalize = Finalize::device;
    int tokens = 0;
    int context = 0;            // as run (after clamping)
    int context_requested = 0;
    std::vector<double> run_tok_s;  // one per timed run
    double decode_tok_s = 0;        // their median
    TokenTraffic traffic;
    std::uint64_t probe_bytes = 0;
    int probe_reps = 0;
    double device_copy_gbs = 0;
    std::optional<double> h2d_gbs;  // measured only when weights stream (not resident)
    double achieved_gbs = 0;        // traffic.total() x decode_tok_s
    double roofline_pct = 0;        // roofline_share(achieved_gbs, device_copy_gbs)
    bool roofline_capped = false;   // the model's bytes streamed faster than the copy probe's
    double enqueues_per_token = 0;  // RuntimeCounters deltas over the timed tokens
    double waits_per_token = 0;
    double uploaded_bytes_per_token = 0;  // streamed weights (0 when resident)
    double upload_gbs = 0;                // uploaded_bytes_per_token x decode_tok_s
    bool profiled = false;
    std::vector<CommandProfile> profile;  // in schedule order
    double profiled_ms_per_token = 0;     // mean wall time per timed token, the shares' denominator
    // --prompt: a prefill of `prompt` positions from position 0, timed per run.
    int prompt = 0;
    std::vector<double> run_prompt_tok_s;  // one per timed run
    double prompt_tok_s = 0;               // their median
    double device_fma_gflops = 0;          // measure_fma_gflops
    double prompt_gflops = 0;              // prefill_flops x prompt_tok_s / prompt
    double prompt_fma_pct = 0;             // prompt_gflops / device_fma_gflops x 100
    bool prompt_tensor_cores = false;      // the prefill's GEMMs ran on tensor cores (KernelSet::tensor_cores)
    PromptPrecision prompt_precision_asked = PromptPrecision::exact;  // --prompt-precision
    PromptPrecision prompt_precision = PromptPrecision::exact;        // as run (DeviceForward::prompt_precision)
    double device_mma_gops = 0;            // measure_mma_gops of their instruction (0: not on tensor cores)
    double prompt_mma_pct = 0;             // prompt_gflops x tensor_core_products / device_mma_gops x 100
    std::vector<CommandProfile> prompt_profile;  // per prompt position
    double prompt_gemm_gflops = 0;               // the profile's GEMM commands together: their flops over their time
    double prompt_gemm_fma_pct = 0;              // prompt_gemm_gflops / device_fma_gflops x 100
    double prompt_profiled_ms_per_token = 0;
};

// Measures everything above for `checkpoint` on `device`. With options.profile the device must have
// been opened with profiling (Device::open(..., true)). Throws usage_error for a bad token count or
// context, Error for device failures.
// achieved / copy x 100, at most 100: a model whose bytes stay in a cache can stream faster than the copy
// probe (which is sized to miss it), and no share of a ceiling reads above it.
double roofline_share(double achieved_gbs, double copy_gbs);

BenchResult run_benchmark(Device& device, const Checkpoint& checkpoint, const std::string& model_name,
                          const BenchOptions& options);

}  // namespace llamacl
