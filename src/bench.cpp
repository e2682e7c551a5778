#include "llamacl/bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>

#include "llamacl/bandwidth_probes.hpp"
#include "llamacl/device_forward.hpp"
#include "llamacl/error.hpp"
#include "llamacl/progress.hpp"
#include "llamacl/sampler.hpp"

namespace llamacl {

namespace {

constexpr int kBos = 1;                     // llama2.c's BOS: the first token of every sequence

// Attention at position p reads the K and V rows of positions 0..p of every layer:
// 2 x n_layers x kv_dim x 4 x (p + 1) bytes. The mean of (p + 1) over p = first..first+tokens-1 is
// first + (tokens + 1) / 2; the row size is even, so the mean is a whole number of bytes.
std::uint64_t kv_read_bytes(const Config& c, int first_pos, int tokens) {
    const std::uint64_t kv_rows = 2ull * c.n_layers * c.kv_dim() * sizeof(float);
    return kv_rows * (2ull * first_pos + tokens + 1) / 2;
}

// Runs `count` positions from `first`, feeding each position the previous one's argmax and never stopping
// at BOS (generation would), so exactly `count` tokens are produced: on the device where it can (as
// `generate -t 0` does), else through the logits. Returns the token after the last.
int decode(DeviceForward& model, int token, int first, int count) {
    if (GreedyDecoder* greedy = model.greedy_decoder()) {
        const int forced[] = {token};
        greedy->start(first, forced, first + count);
        for (int pos = first; pos < first + count; ++pos) token = greedy->next(pos);
        return token;
    }
    for (int pos = first; pos < first + count; ++pos) token = sample_argmax(model.forward(token, pos));
    return token;
}

double median(std::vector<double> values) {
    std::sort(values.begin(), values.end());
    const std::size_t n = values.size();
    return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One row per command name, in the order the schedule first enqueues them; `bytes_of` and `flops_of`
// give a command's bytes and flops per token (or prompt position).
std::vector<CommandProfile> summarize_profile(const std::vector<LaunchRecord>& log, double timed_tokens,
                                              double wall_ms_per_token,
                                              const std::function<double(const std::string&)>& bytes_of,
                                              const std::function<double(const std::string&)>& flops_of) {
    std::vector<CommandProfile> rows;
    for (const LaunchRecord& record : log) {
        if (record.event() == nullptr) continue;  // the enqueue failed; the run did not complete anyway
        auto row = std::find_if(rows.begin(), rows.end(), [&](const CommandProfile& p) { return p.name == record.name(); });
        if (row == rows.end()) {
            rows.push_back({record.name()});
            row = rows.end() - 1;
        }
        row->count_per_token += 1;
        row->ms_per_token += event_seconds(record.event) * 1e3;
    }
    for (CommandProfile& row : rows) {
        row.count_per_token /= timed_tokens;
        row.ms_per_token /= timed_tokens;
        row.share_pct = row.ms_per_token / wall_ms_per_token * 100;
        row.bytes_per_token = bytes_of(row.name);
        row.flops_per_token = flops_of(row.name);
        row.gbs = row.ms_per_token > 0 ? row.bytes_per_token / (row.ms_per_token * 1e-3) / 1e9 : 0;
        row.gflops = row.ms_per_token > 0 ? row.flops_per_token / (row.ms_per_token * 1e-3) / 1e9 : 0;
    }
    return rows;
}

// The timed part: every run decodes the same `tokens` positions from the same token, so the runs do the
// same work and their median is a fair tokens/s.
void time_decode(DeviceForward& model, const BenchOptions& o, BenchResult& r, const ProgressLine& progress) {
    // Untimed: the context, then one token at the first timed position, which pays the first launch of
    // every kernel (PoCL compiles kernels for their work-group size then). The timed runs rewrite the KV
    // rows of their positions with the same values.
    progress.update("bench: running the context (" + std::to_string(r.context) + " positions) and a first token");
    const int start = decode(model, kBos, 0, r.context);
    decode(model, start, r.context, 1);

    std::vector<LaunchRecord> log;
    if (o.profile) {
        log.reserve(static_cast<std::size_t>(5 * r.config.n_layers + 4) * r.tokens * o.runs);
        model.record_launches(&log);
    }
    const RuntimeCounters before = model.counters();
    double total_s = 0;
    for (int run = 0; run < o.runs; ++run) {
        progress.update("bench: timed run " + std::to_string(run + 1) + " of " + std::to_string(o.runs));
        const auto t0 = std::chrono::steady_clock::now();
        decode(model, start, r.context, r.tokens);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total_s += s;
        r.run_tok_s.push_back(r.tokens / s);
    }
    model.record_launches(nullptr);

    const double timed_tokens = static_cast<double>(o.runs) * r.tokens;
    const RuntimeCounters delta = model.counters() - before;
    r.decode_tok_s = median(r.run_tok_s);
    r.enqueues_per_token = static_cast<double>(delta.enqueues) / timed_tokens;
    r.waits_per_token = static_cast<double>(delta.host_waits) / timed_tokens;
    r.uploaded_bytes_per_token = static_cast<double>(delta.weight_bytes_uploaded) / timed_tokens;
    if (o.profile) {
        r.profiled = true;
        r.profiled_ms_per_token = total_s * 1e3 / timed_tokens;
        r.profile = summarize_profile(
            log, timed_tokens, r.profiled_ms_per_token,
            [&](const std::string& name) {
                return static_cast<double>(command_bytes_per_token(name, r.config, r.finalize, r.context, r.tokens));
            },
            [&](const std::string& name) {
                return static_cast<double>(command_flops_per_token(name, r.config, r.finalize, r.context, r.tokens));
            });
    }
}

// A prompt of `n` tokens: BOS, then tokens spread over the vocabulary.
std::vector<int> bench_prompt(int n, int vocab) {
    std::vector<int> tokens = {kBos};
    for (int i = 1; i < n; ++i) tokens.push_back(static_cast<int>((i * 7919LL + 13) % vocab));
    return tokens;
}

// Every run prefills the same prompt from position 0, after one untimed run that pays the kernels' first launches.
void time_prefill(DeviceForward& model, const BenchOptions& o, BenchResult& r, const ProgressLine& progress) {
    const std::vector<int> prompt = bench_prompt(r.prompt, r.config.vocab_size);
    progress.update("bench: a first prefill of the prompt (" + std::to_string(r.prompt) + " positions)");
    model.prefill(prompt, 0);
    std::vector<LaunchRecord> log;
    if (o.profile) model.record_launches(&log);
    double total_s = 0;
    for (int run = 0; run < o.runs; ++run) {
        progress.update("bench: timed prefill " + std::to_string(run + 1) + " of " + std::to_string(o.runs));
        const auto t0 = std::chrono::steady_clock::now();
        model.prefill(prompt, 0);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        total_s += s;
        r.run_prompt_tok_s.push_back(r.prompt / s);
    }
    model.record_launches(nullptr);
    r.prompt_tok_s = median(r.run_prompt_tok_s);
    r.prompt_gflops = prefill_flops(r.config, r.prompt) * r.prompt_tok_s / r.prompt / 1e9;
    r.prompt_fma_pct = r.prompt_gflops / r.device_fma_gflops * 100;
    if (r.prompt_tensor_cores)
        r.prompt_mma_pct =
            r.prompt_gflops * tensor_core_products(r.config.weight_format.type, r.prompt_precision) /
            r.device_mma_gops * 100;
    if (o.profile) {
        const double timed = static_cast<double>(o.runs) * r.prompt;
        r.prompt_profiled_ms_per_token = total_s * 1e3 / timed;
        r.prompt_profile = summarize_profile(
            log, timed, r.prompt_profiled_ms_per_token,
            [&](const std::string& name) { return prefill_command_bytes(name, r.config, r.prompt, r.plan.prefill_batch); },
            [&](const std::string& name) { return prefill_command_flops(name, r.config, r.prompt); });
        double gemm_ms = 0, gemm_flops = 0;
        for (const CommandProfile& row : r.prompt_profile) {
            if (!is_gemm_command(row.name)) continue;
            gemm_ms += row.ms_per_token;
            gemm_flops += row.flops_per_token;
        }
        if (gemm_ms > 0) {
            r.prompt_gemm_gflops = gemm_flops / (gemm_ms * 1e-3) / 1e9;
            r.prompt_gemm_fma_pct = r.prompt_gemm_gflops / r.device_fma_gflops * 100;
        }
    }
}

void check_options(const BenchOptions& o, const Config& c) {
    if (o.prompt < 0 || o.prompt > c.seq_len)
        throw usage_error("--prompt: positions must be between 0 (none) and the model's seq_len (" + std::to_string(c.seq_len) +
                          "), got " + std::to_string(o.prompt));
    if (o.tokens < 1 || o.tokens > c.seq_len)
        throw usage_error("-n: tokens must be between 1 and the model's seq_len (" + std::to_string(c.seq_len) +
                          "), got " + std::to_string(o.tokens));
    if (o.context < 0) throw usage_error("--context: must be >= 0, got " + std::to_string(o.context));
    if (o.runs < 1) throw usage_error("--runs: must be >= 1, got " + std::to_string(o.runs));
    if (o.probe_reps < 1) throw usage_error("bandwidth probe repetitions must be >= 1");
}

bool queue_profiles(const Device& device) {
    return (device.queue().getInfo<CL_QUEUE_PROPERTIES>() & CL_QUEUE_PROFILING_ENABLE) != 0;
}

}  // namespace

double prefill_flops(const Config& c, int prompt) {
    const double dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim, n = prompt;
    const double layer_params = 2 * dim * dim + 2 * dim * kv + 3 * dim * hidden;  // wq, wo; wk, wv; w1, w2, w3
    const double attention = 4 * dim * n * (n + 1) / 2;                          // positions 0..p for each p
    return c.n_layers * (2 * layer_params * n + attention) + 2.0 * c.vocab_size * dim;
}

MmaOperands tensor_core_operands(ElementType weights) {
    return quantized(weights) ? MmaOperands::int8 : MmaOperands::tf32;
}

int tensor_core_products(ElementType weights, PromptPrecision precision) {
    if (quantized(weights) || precision == PromptPrecision::fast) return 1;
    return weights == ElementType::f16 ? 2 : 3;
}

std::string tensor_core_name(ElementType weights, PromptPrecision precision) {
    return tensor_core_operands(weights) == MmaOperands::int8
               ? "int8"
               : std::to_string(tensor_core_products(weights, precision)) + "xTF32";
}

double prefill_bytes(const Config& c, int prompt, int batch) {
    const TokenTraffic t = token_traffic(c, Finalize::device, 0, prompt);  // kv_read_bytes: the mean per position
    const int batches = (prompt + batch - 1) / batch;
    return static_cast<double>(batches) * static_cast<double>(t.layer_weight_bytes) +
           static_cast<double>(t.classifier_bytes) + static_cast<double>(t.kv_read_bytes) * prompt;
}

TokenTraffic token_traffic(const Config& c, Finalize finalize, int first_pos, int tokens) {
    const ModelSize size(c);
    TokenTraffic t;
    t.layer_weight_bytes = size.layer_bytes() * static_cast<std::uint64_t>(c.n_layers);
    // The device's classifier is vocab x dim whether it is the embedding table (shared) or its own matrix.
    if (finalize == Finalize::device) t.classifier_bytes = size.embedding_bytes() + c.dim * sizeof(float);
    t.kv_read_bytes = kv_read_bytes(c, first_pos, tokens);
    return t;
}

std::uint64_t command_bytes_per_token(const std::string& name, const Config& c, Finalize finalize, int first_pos,
                                      int tokens) {
    const std::uint64_t f = sizeof(float), layers = c.n_layers, dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim;
    const WeightFormat& w = c.weight_format;  // the matrices' (the norms' weights are floats)
    if (name == "attn_qkv_rope") return layers * (dim * f + w.bytes(dim * dim + 2 * kv * dim));  // rms_att, wq, wk, wv
    if (name == "attention") return kv_read_bytes(c, first_pos, tokens);
    if (name == "matvec_residual(wo)") return layers * w.bytes(dim * dim);
    if (name == "ffn_gate_up") return layers * (dim * f + w.bytes(2 * hidden * dim));  // rms_ffn, w1, w3
    if (name == "matvec_residual(w2)") return layers * w.bytes(hidden * dim);
    // The final norm's weights are counted with the classifier, which reads them when it normalizes itself.
    if (name == "rmsnorm(final)") return 0;
    if (name == "classifier") return token_traffic(c, finalize, first_pos, tokens).classifier_bytes;
    // argmax_embed reads the logits (activations, not counted) and the next token's embedding row.
    if (name == "write_embedding" || name == "read_hidden" || name == "argmax_embed") return dim * f;
    if (name == "read_tokens") return sizeof(cl_int);  // a batch's read, 4 bytes for each of its tokens
    if (name == "read_logits") return static_cast<std::uint64_t>(c.vocab_size) * f;
    if (name == "forward_token") return token_traffic(c, finalize, first_pos, tokens).total();  // all of the above
    return 0;
}

bool is_gemm_command(const std::string& name) { return name.rfind("gemm", 0) == 0; }

double prefill_command_bytes(const std::string& name, const Config& c, int prompt, int batch) {
    const double f = sizeof(float), layers = c.n_layers, dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim;
    const WeightFormat& w = c.weight_format;
    const auto matrix = [&](double rows) { return static_cast<double>(w.bytes(static_cast<std::uint64_t>(rows * dim))); };
    // A layer's weights are read once a batch, so a position's share is 1 / prompt of every batch's reads.
    const double per_batch = layers * std::ceil(static_cast<double>(prompt) / batch) / prompt;
    if (name == "rmsnorm_rows") return per_batch * 2 * dim * f;  // rms_att, rms_ffn
    if (name == "gemm_qkv_rope") return per_batch * matrix(dim + 2 * kv);
    if (name == "gemm(wq)" || name == "gemm(wo)") return per_batch * matrix(dim);
    if (name == "gemm(wk)" || name == "gemm(wv)") return per_batch * matrix(kv);
    if (name == "gemm_gate_up") return per_batch * matrix(2 * hidden);
    if (name == "gemm(w1)" || name == "gemm(w3)" || name == "gemm(w2)") return per_batch * matrix(hidden);
    if (name == "attention_rows" || name == "attention_tiles") return static_cast<double>(kv_read_bytes(c, 0, prompt));
    if (name == "classifier")
        return static_cast<double>(token_traffic(c, Finalize::device, 0, prompt).classifier_bytes) / prompt;
    if (name == "write_embeddings") return dim * f;
    if (name == "read_logits") return c.vocab_size * f / prompt;
    return 0;
}

double prefill_command_flops(const std::string& name, const Config& c, int prompt) {
    const double layers = c.n_layers, dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim;
    if (name == "gemm_qkv_rope") return layers * 2 * (dim + 2 * kv) * dim;
    if (name == "gemm(wq)" || name == "gemm(wo)") return layers * 2 * dim * dim;
    if (name == "gemm(wk)" || name == "gemm(wv)") return layers * 2 * kv * dim;
    if (name == "gemm_gate_up") return layers * 4 * hidden * dim;
    if (name == "gemm(w1)" || name == "gemm(w3)" || name == "gemm(w2)") return layers * 2 * hidden * dim;
    if (name == "attention_rows" || name == "attention_tiles") return layers * 4 * dim * (prompt + 1.0) / 2;
    if (name == "classifier") return 2.0 * c.vocab_size * dim / prompt;
    return 0;
}

std::uint64_t command_flops_per_token(const std::string& name, const Config& c, Finalize finalize, int first_pos,
                                      int tokens) {
    const std::uint64_t layers = c.n_layers, dim = c.dim, kv = c.kv_dim(), hidden = c.hidden_dim;
    if (name == "attn_qkv_rope") return layers * 2 * (dim + 2 * kv) * dim;
    // Each head's query against every cached key, then the weighted sum of the values: 2 x 2 x head_size
    // per position, mean over the timed positions as kv_read_bytes.
    if (name == "attention") return layers * 4 * dim * (2ull * first_pos + tokens + 1) / 2;
    if (name == "matvec_residual(wo)") return layers * 2 * dim * dim;
    if (name == "ffn_gate_up") return layers * 2 * 2 * hidden * dim;
    if (name == "matvec_residual(w2)") return layers * 2 * hidden * dim;
    if (name == "classifier") return finalize == Finalize::device ? 2ull * c.vocab_size * dim : 0;
    if (name == "forward_token") {
        std::uint64_t sum = 0;
        for (const char* k : {"attn_qkv_rope", "attention", "matvec_residual(wo)", "ffn_gate_up", "matvec_residual(w2)",
                              "classifier"})
            sum += command_flops_per_token(k, c, finalize, first_pos, tokens);
        return sum;
    }
    return 0;
}

double roofline_share(double achieved_gbs, double copy_gbs) {
    return achieved_gbs >= copy_gbs ? 100.0 : achieved_gbs / copy_gbs * 100;
}

BenchResult run_benchmark(Device& device, const Checkpoint& ck, const std::string& model_name,
                          const BenchOptions& o) {
    const Config& c = ck.config();
    check_options(o, c);
    if (o.profile && !queue_profiles(device))
        throw Error("--profile: the device's queue was opened without profiling (Device::open(..., true))");

    BenchResult r;
    r.device = device.info();
    r.model = model_name;
    r.config = c;
    r.finalize = o.device.finalize;
    r.tokens = o.tokens;
    r.context_requested = o.context;
    r.context = std::min(o.context, c.seq_len - o.tokens);  // the last timed token is at most seq_len - 1
    r.traffic = token_traffic(c, r.finalize, r.context, r.tokens);
    DeviceOptions options = o.device;
    // The KV cache holds what the runs reach: the prompt's positions, the context and the timed tokens.
    options.positions = std::max(o.prompt, r.context + r.tokens);
    try {
        // The bandwidth and FMA probes run and free their buffers before the model is loaded, so they never
        // compete with the weights for device memory; the plan says beforehand whether weights will stream.
        // (The tensor cores' probe runs after it: only a loaded model says whether prefill takes them, and
        // its buffer is 4 bytes a work-item.)
        const CapacityPlan plan = plan_capacity(
            c, device.info(), options.finalize, options.layers_per_offload, options.memory_limit,
            prefill_batch_for(launch_shape_for(options.shape, device.info(), c.weight_format),
                              within_positions(c, options.positions)),
            options.positions);
        r.probe_bytes = probe_bytes_for(device.info(), o.probe_bytes);
        const ProgressLine progress("bench: measuring the copy bandwidth (" + std::to_string(r.probe_bytes / kMiB) +
                                    " MiB)");
        r.probe_reps = o.probe_reps;
        r.device_copy_gbs = measure_copy_gbs(device, r.probe_bytes, o.probe_reps);
        if (!plan.resident()) r.h2d_gbs = measure_h2d_gbs(device, r.probe_bytes, o.probe_reps);
        r.prompt = o.prompt;
        if (r.prompt > 0) {
            progress.update("bench: measuring the FMA throughput");
            r.device_fma_gflops = measure_fma_gflops(device, o.probe_reps);
        }

        progress.update("bench: loading the model onto " + device.info().name);
        DeviceForward model(device, ck, options);
        r.plan = model.plan();
        r.shape = model.shape();
        r.host_mirror = model.host_mirror();
        r.prompt_tensor_cores = model.tensor_cores();
        r.prompt_precision_asked = options.prompt_precision;
        r.prompt_precision = model.prompt_precision();
        if (r.prompt > 0 && r.prompt_tensor_cores) {
            progress.update("bench: measuring the tensor cores' throughput");
            r.device_mma_gops = measure_mma_gops(device, tensor_core_operands(c.weight_format.type), o.probe_reps);
        }
        if (r.prompt > 0) time_prefill(model, o, r, progress);
        time_decode(model, o, r, progress);
        // After the runs: the token kernel may have given up during them and left the rest per op.
        r.schedule = model.token_schedule() ? "token" : "per-op";
        r.token_groups = model.token_groups();
        r.per_op_reason = model.per_op_reason();
        r.argmax = model.greedy_decoder() ? "device" : "host";
    } catch (const cl::Error& e) {
        throw Error(device.info().name + ": " + describe(e));
    }
    r.achieved_gbs = static_cast<double>(r.traffic.total()) * r.decode_tok_s / 1e9;
    r.roofline_pct = roofline_share(r.achieved_gbs, r.device_copy_gbs);
    r.roofline_capped = r.achieved_gbs > r.device_copy_gbs;
    r.upload_gbs = r.uploaded_bytes_per_token * r.decode_tok_s / 1e9;
    return r;
}

}  // namespace llamacl
