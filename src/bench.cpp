#include "llamacl/bench.hpp"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "llamacl/embedded_kernels.hpp"
#include "llamacl/error.hpp"
#include "llamacl/sampler.hpp"
#include "llamacl/export.hpp"
#include "llamacl/synthetic.hpp"

namespace llamacl {

namespace {

constexpr int kBos = 1;                     // llama2.c's BOS: the first token of every sequence
constexpr std::uint64_t kMiB = 1024 * 1024;
constexpr std::uint64_t kSyntheticSeed = 1;  // --synthetic weights; any fixed seed gives the same speed

// Attention at position p reads the K and V rows of positions 0..p of every layer:
// 2 x n_layers x kv_dim x 4 x (p + 1) bytes. The mean of (p + 1) over p = first..first+tokens-1 is
// first + (tokens + 1) / 2; the row size is even, so the mean is a whole number of bytes.
std::uint64_t kv_read_bytes(const Config& c, int first_pos, int tokens) {
    const std::uint64_t kv_rows = 2ull * c.n_layers * c.kv_dim() * sizeof(float);
    return kv_rows * (2ull * first_pos + tokens + 1) / 2;
}

// ---- bandwidth probes ---------------------------------------------------------------------------------

cl::Program copy_program(const Device& device) {
    for (const EmbeddedKernel& k : embedded_kernels())
        if (k.file == "copy.cl") return device.build_program_from_source(std::string(k.source), "");
    throw Error("kernels/copy.cl is not embedded in this build");
}

// The probes time themselves on a queue of their own with profiling on, whatever the main queue is.
cl::CommandQueue profiling_queue(const Device& device) {
    return cl::CommandQueue(device.context(), device.device(), CL_QUEUE_PROFILING_ENABLE);
}

double event_seconds(const cl::Event& event) {
    const cl_ulong start = event.getProfilingInfo<CL_PROFILING_COMMAND_START>();
    const cl_ulong end = event.getProfilingInfo<CL_PROFILING_COMMAND_END>();
    return static_cast<double>(end - start) * 1e-9;
}

// The shortest of `reps` runs of `enqueue` after one untimed warm-up. A bandwidth is a ceiling: the
// fastest run is the one least disturbed by everything else on the machine.
template <typename Enqueue>
double best_seconds(cl::CommandQueue& queue, int reps, Enqueue enqueue) {
    cl::Event event;
    enqueue(&event);
    queue.finish();
    double best = 0;
    for (int r = 0; r < reps; ++r) {
        enqueue(&event);
        event.wait();
        const double s = event_seconds(event);
        if (r == 0 || s < best) best = s;
    }
    return best;
}

// Whole MiB, so the copy's global size (in float4s) is a multiple of every work-group size a driver picks.
std::uint64_t probe_size(std::uint64_t bytes) { return std::max<std::uint64_t>(bytes / kMiB, 1) * kMiB; }


// ---- decode -------------------------------------------------------------------------------------------

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

// One row per command name, in the order the schedule first enqueues them.
std::vector<CommandProfile> summarize_profile(const std::vector<LaunchRecord>& log, const BenchResult& r,
                                              double timed_tokens, double wall_ms_per_token) {
    std::vector<CommandProfile> rows;
    for (const LaunchRecord& record : log) {
        if (record.event() == nullptr) continue;  // the enqueue failed; the run did not complete anyway
        auto row = std::find_if(rows.begin(), rows.end(), [&](const CommandProfile& p) { return p.name == record.name; });
        if (row == rows.end()) {
            rows.push_back({record.name});
            row = rows.end() - 1;
        }
        row->count_per_token += 1;
        row->ms_per_token += event_seconds(record.event) * 1e3;
    }
    for (CommandProfile& row : rows) {
        row.count_per_token /= timed_tokens;
        row.ms_per_token /= timed_tokens;
        row.share_pct = row.ms_per_token / wall_ms_per_token * 100;
        row.bytes_per_token = command_bytes_per_token(row.name, r.config, r.finalize, r.context, r.tokens);
        row.gbs = row.ms_per_token > 0 ? static_cast<double>(row.bytes_per_token) / (row.ms_per_token * 1e-3) / 1e9 : 0;
    }
    return rows;
}

// The timed part: every run decodes the same `tokens` positions from the same token, so the runs do the
// same work and their median is a fair tokens/s.
void time_decode(DeviceForward& model, const BenchOptions& o, BenchResult& r) {
    // Untimed: the context, then one token at the first timed position, which pays the first launch of
    // every kernel (PoCL compiles kernels for their work-group size then). The timed runs rewrite the KV
    // rows of their positions with the same values.
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
        r.profile = summarize_profile(log, r, timed_tokens, r.profiled_ms_per_token);
    }
}

void check_options(const BenchOptions& o, const Config& c) {
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

// ---- reports ------------------------------------------------------------------------------------------

std::string format(const char* fmt, auto... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, args...);
    return buf;
}

double mb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }
double mb(double bytes) { return bytes / 1e6; }

const char* finalize_name(Finalize f) { return f == Finalize::device ? "device" : "cpu"; }

std::string shape_name(const LaunchShape& s) { return std::to_string(s.row_threads) + "x" + std::to_string(s.local_size); }

std::string plan_text(const CapacityPlan& p, bool host_mirror) {
    if (p.resident()) return "all " + std::to_string(p.n_layers) + " layers resident";
    return std::to_string(p.layers_per_offload) + " layers per offload (" + std::to_string(p.chunks()) +
           " chunks per token, weights stream from " +
           (host_mirror ? "a pinned mirror of the layers" : "one pinned buffer refilled per chunk") + ")";
}

std::string profile_table(const BenchResult& r) {
    std::string t = format("\nper command (OpenCL event timestamps, mean over %d timed tokens; %.3f ms wall per token):\n",
                           static_cast<int>(r.run_tok_s.size()) * r.tokens, r.profiled_ms_per_token);
    t += format("  %-22s %9s %12s %8s %12s %9s\n", "command", "per token", "ms/token", "share", "MB/token", "GB/s");
    double device_ms = 0;
    for (const CommandProfile& p : r.profile) {
        t += format("  %-22s %9.2f %12.4f %7.1f%% %12.3f %9.2f\n", p.name.c_str(), p.count_per_token, p.ms_per_token,
                    p.share_pct, mb(p.bytes_per_token), p.gbs);
        device_ms += p.ms_per_token;
    }
    const double other = r.profiled_ms_per_token - device_ms;
    t += format("  %-22s %9s %12.4f %7.1f%%   (host work, launch gaps%s)\n", "not in a command", "", other,
                other / r.profiled_ms_per_token * 100, r.plan.resident() ? "" : ", streamed weight uploads");
    return t;
}

// JSON text: strings escaped, non-finite numbers as null.
std::string json_string(const std::string& s) {
    std::string out = "\"";
    for (const unsigned char ch : s) {
        if (ch == '"' || ch == '\\') out += {'\\', static_cast<char>(ch)};
        else if (ch < 0x20) out += format("\\u%04x", ch);
        else out += static_cast<char>(ch);
    }
    return out + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? format("%.10g", v) : "null"; }
std::string json_number(std::uint64_t v) { return std::to_string(v); }
std::string json_number(int v) { return std::to_string(v); }

// Builds one JSON object field by field, in insertion order.
class JsonObject {
public:
    template <typename T>
    JsonObject& number(const char* key, T value) { return raw(key, json_number(value)); }
    JsonObject& string(const char* key, const std::string& value) { return raw(key, json_string(value)); }
    JsonObject& boolean(const char* key, bool value) { return raw(key, value ? "true" : "false"); }
    JsonObject& raw(const char* key, const std::string& json) {
        text_ += (text_.empty() ? "{" : ", ") + json_string(key) + ": " + json;
        return *this;
    }
    std::string str() const { return text_.empty() ? "{}" : text_ + "}"; }

private:
    std::string text_;
};

std::string json_config(const Config& c) {
    return JsonObject()
        .number("dim", c.dim)
        .number("hidden_dim", c.hidden_dim)
        .number("n_layers", c.n_layers)
        .number("n_heads", c.n_heads)
        .number("n_kv_heads", c.n_kv_heads)
        .number("vocab_size", c.vocab_size)
        .number("seq_len", c.seq_len)
        .boolean("shared_classifier", c.shared_classifier)
        .string("weights", element_name(c.weight_format.type))
        .number("group_size", c.weight_format.group_size)
        .str();
}

std::string json_profile(const std::vector<CommandProfile>& rows) {
    std::string out = "[";
    for (const CommandProfile& p : rows) {
        out += (out.size() > 1 ? ", " : "") + JsonObject()
                                                  .string("name", p.name)
                                                  .number("count_per_token", p.count_per_token)
                                                  .number("ms_per_token", p.ms_per_token)
                                                  .number("share_pct", p.share_pct)
                                                  .number("bytes_per_token", p.bytes_per_token)
                                                  .number("gbs", p.gbs)
                                                  .str();
    }
    return out + "]";
}

// ---- command line -------------------------------------------------------------------------------------

std::string joined(const std::vector<std::string>& names) {
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
}

void check_bench_args(const BenchArgs& a) {
    if (a.checkpoint.empty() == a.synthetic.empty())
        throw usage_error("bench: give either a CHECKPOINT or --synthetic PRESET (one of " + joined(preset_names()) + ")");
    if (!a.synthetic.empty() && !preset_config(a.synthetic))
        throw usage_error("--synthetic: unknown preset '" + a.synthetic + "'; presets: " + joined(preset_names()));
}

Checkpoint load_model(const BenchArgs& a) {
    if (a.synthetic.empty()) return with_weights(Checkpoint::open(a.checkpoint), weights_format(a.weights));
    return with_weights(Checkpoint::from_image(synthetic_checkpoint_image(*preset_config(a.synthetic), 0, kSyntheticSeed),
                                               "synthetic:" + a.synthetic),
                        weights_format(a.weights));
}

}  // namespace

std::uint64_t default_probe_bytes(const DeviceInfo& info) {
    // Far larger than any cache, while the probe's two buffers take at most half of the device memory.
    return probe_size(std::min({std::uint64_t{1024} * kMiB, info.max_alloc_bytes, info.global_mem_bytes / 4}));
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

double measure_copy_gbs(const Device& device, std::uint64_t bytes, int reps) {
    bytes = probe_size(bytes);
    cl::CommandQueue queue = profiling_queue(device);
    cl::Buffer src = device.allocate(bytes, "copy bandwidth probe (source)");
    cl::Buffer dst = device.allocate(bytes, "copy bandwidth probe (destination)");
    // Writing both first makes lazily allocating drivers back them with memory before anything is timed.
    queue.enqueueFillBuffer(src, 0.0f, 0, bytes);
    queue.enqueueFillBuffer(dst, 0.0f, 0, bytes);
    cl::Kernel copy(copy_program(device), "copy_f32");
    copy.setArg(0, src);
    copy.setArg(1, dst);
    const cl::NDRange float4s(bytes / (4 * sizeof(float)));
    const double s = best_seconds(queue, reps, [&](cl::Event* event) {
        queue.enqueueNDRangeKernel(copy, cl::NullRange, float4s, cl::NullRange, nullptr, event);
    });
    return 2.0 * static_cast<double>(bytes) / s / 1e9;  // every byte is read once and written once
}

double measure_h2d_gbs(const Device& device, std::uint64_t bytes, int reps) {
    bytes = probe_size(bytes);
    cl::CommandQueue queue = profiling_queue(device);
    PinnedBuffer host(device, bytes, "host-to-device probe (pinned host side)");
    std::memset(host.data(), 0, bytes);  // fault the pages in before timing
    cl::Buffer dst = device.allocate(bytes, "host-to-device probe (device side)");
    const double s = best_seconds(queue, reps, [&](cl::Event* event) {
        queue.enqueueWriteBuffer(dst, CL_FALSE, 0, bytes, host.data(), nullptr, event);
    });
    return static_cast<double>(bytes) / s / 1e9;
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
    try {
        // The probes run and free their buffers before the model is loaded, so they never compete with
        // the weights for device memory; the plan says beforehand whether weights will stream.
        const CapacityPlan plan = plan_capacity(c, device.info(), o.device.finalize, o.device.layers_per_offload,
                                                o.device.memory_limit);
        r.probe_bytes = probe_size(o.probe_bytes ? o.probe_bytes : default_probe_bytes(device.info()));
        r.probe_reps = o.probe_reps;
        r.device_copy_gbs = measure_copy_gbs(device, r.probe_bytes, o.probe_reps);
        if (!plan.resident()) r.h2d_gbs = measure_h2d_gbs(device, r.probe_bytes, o.probe_reps);

        DeviceForward model(device, ck, o.device);
        r.plan = model.plan();
        r.shape = model.shape();
        r.host_mirror = model.host_mirror();
        time_decode(model, o, r);
        // After the runs: the token kernel may have given up during them and left the rest per op.
        r.schedule = model.token_schedule() ? "token" : "per-op";
        r.token_groups = model.token_groups();
        r.per_op_reason = model.per_op_reason();
        r.argmax = model.greedy_decoder() ? "device" : "host";
    } catch (const cl::Error& e) {
        throw Error(device.info().name + ": " + describe(e));
    }
    r.achieved_gbs = static_cast<double>(r.traffic.total()) * r.decode_tok_s / 1e9;
    r.roofline_pct = r.achieved_gbs / r.device_copy_gbs * 100;
    r.upload_gbs = r.uploaded_bytes_per_token * r.decode_tok_s / 1e9;
    return r;
}

std::string format_bench_text(const BenchResult& r) {
    const Config& c = r.config;
    std::string t;
    t += "device:      " + r.device.name + " (" + r.device.platform_name + ", " + r.device.type + ", driver " +
         r.device.driver_version + ")\n";
    t += "model:       " + r.model +
         format(": dim %d, hidden %d, %d layers, %d/%d heads, vocab %d, seq_len %d, %s weights\n", c.dim, c.hidden_dim,
                c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len, c.weight_format.describe().c_str());
    t += "plan:        " + plan_text(r.plan, r.host_mirror) + "; finalize on " + finalize_name(r.finalize) + "; kernels " +
         shape_name(r.shape) + " (" + r.shape.describe() + ")\n";
    t += "schedule:    " + describe_schedule(r.token_groups, r.per_op_reason) +
         (r.argmax == "device" ? "; greedy decoding on the device" : "; argmax on the host") + "\n";
    std::string runs;
    for (double v : r.run_tok_s) runs += format(" %.2f", v);
    t += format("decode:      %.2f tok/s (%.3f ms/token), median of %d runs of %d tokens at positions %d..%d;"
                " runs:%s\n",
                r.decode_tok_s, 1e3 / r.decode_tok_s, static_cast<int>(r.run_tok_s.size()), r.tokens, r.context,
                r.context + r.tokens - 1, runs.c_str());
    if (r.context != r.context_requested)
        t += format("             (--context %d clamped to seq_len - tokens = %d)\n", r.context_requested, r.context);
    t += format("bytes/token: %.3f MB = layer weights %.3f + final norm and classifier %.3f + KV reads %.3f\n",
                mb(r.traffic.total()), mb(r.traffic.layer_weight_bytes), mb(r.traffic.classifier_bytes),
                mb(r.traffic.kv_read_bytes));
    t += format("copy:        %.2f GB/s device copy bandwidth (copy_f32 over %llu MiB, best of %d)\n", r.device_copy_gbs,
                static_cast<unsigned long long>(r.probe_bytes / kMiB), r.probe_reps);
    t += format("achieved:    %.2f GB/s = %.1f%% of the copy bandwidth (roofline)\n", r.achieved_gbs, r.roofline_pct);
    if (r.h2d_gbs) {
        t += format("host->device: %.2f GB/s pinned (best of %d); streamed %.3f MB/token = %.2f GB/s = %.1f%% of it\n",
                    *r.h2d_gbs, r.probe_reps,
                    mb(r.uploaded_bytes_per_token), r.upload_gbs, r.upload_gbs / *r.h2d_gbs * 100);
    }
    t += format("per token:   %.2f enqueues, %.2f host waits\n", r.enqueues_per_token, r.waits_per_token);
    if (r.profiled) t += profile_table(r);
    return t;
}

std::string format_bench_json(const BenchResult& r) {
    JsonObject j;
    j.string("device", r.device.name)
        .string("platform", r.device.platform_name)
        .string("device_type", r.device.type)
        .string("driver_version", r.device.driver_version)
        .string("model", r.model)
        .raw("config", json_config(r.config))
        .number("layers_per_offload", r.plan.layers_per_offload)
        .boolean("resident", r.plan.resident())
        .boolean("host_mirror", r.host_mirror)
        .number("chunks_per_token", r.plan.chunks())
        .string("finalize", finalize_name(r.finalize))
        .string("work_shape", shape_name(r.shape))
        .string("schedule", r.schedule)
        .string("per_op_reason", r.per_op_reason)
        .string("argmax", r.argmax)
        .number("tokens", r.tokens)
        .number("context", r.context)
        .number("context_requested", r.context_requested)
        .number("runs", static_cast<int>(r.run_tok_s.size()));
    std::string runs = "[";
    for (double v : r.run_tok_s) runs += (runs.size() > 1 ? ", " : "") + json_number(v);
    j.raw("run_tok_s", runs + "]")
        .number("decode_tok_s", r.decode_tok_s)
        .number("ms_per_token", 1e3 / r.decode_tok_s)
        .number("bytes_per_token", r.traffic.total())
        .raw("bytes_per_token_breakdown", JsonObject()
                                              .number("layer_weights", r.traffic.layer_weight_bytes)
                                              .number("final_norm_and_classifier", r.traffic.classifier_bytes)
                                              .number("kv_reads", r.traffic.kv_read_bytes)
                                              .str())
        .string("bytes_per_token_definition",
                "device reads per token: all layer weights + final RMSNorm and vocab x dim classifier (finalize=device "
                "only) + K and V of positions 0..pos for every layer, averaged over the timed positions")
        .number("probe_bytes", r.probe_bytes)
        .number("probe_reps", r.probe_reps)
        .number("device_copy_gbs", r.device_copy_gbs)
        .raw("h2d_gbs", r.h2d_gbs ? json_number(*r.h2d_gbs) : "null")
        .number("achieved_gbs", r.achieved_gbs)
        .number("roofline_pct", r.roofline_pct)
        .number("uploaded_bytes_per_token", r.uploaded_bytes_per_token)
        .number("upload_gbs", r.upload_gbs)
        .number("enqueues_per_token", r.enqueues_per_token)
        .number("waits_per_token", r.waits_per_token)
        .boolean("profiled", r.profiled);
    if (r.profiled) j.number("profiled_ms_per_token", r.profiled_ms_per_token).raw("profile", json_profile(r.profile));
    return j.str() + "\n";
}

void add_bench_command(CLI::App& app, BenchArgs& a) {
    CLI::App* cmd = app.add_subcommand(
        "bench", "Measure decode tokens/s, bytes per token, device bandwidth and the roofline on an OpenCL device");
    cmd->add_option("checkpoint", a.checkpoint, "llama2.c checkpoint (or --synthetic)");
    cmd->add_option("--synthetic", a.synthetic,
                    "benchmark a seeded random model of this shape, built in memory: " + joined(preset_names()));
    cmd->add_option("-n,--tokens", a.tokens, "decode tokens timed per run")->capture_default_str();
    cmd->add_option("--context", a.context,
                    "positions run untimed before the timed tokens (clamped to seq_len - tokens: a large value "
                    "times the last positions of the context)")
        ->capture_default_str();
    cmd->add_option("--runs", a.runs, "timed runs; tokens/s is their median")->capture_default_str();
    add_weights_option(*cmd, a.weights);
    add_runtime_options(*cmd, a.runtime);
    cmd->add_option("--probe-mib", a.probe_mib,
                    "bandwidth probe buffer size in MiB (default: min(1024, max allocation, global memory / 4))")
        ->check(positive_number());
    cmd->add_flag("--profile", a.profile, "add a per-kernel table from OpenCL event timestamps");
    cmd->add_flag("--json", a.json, "print one JSON object instead of the text report");
}

int run_bench(const BenchArgs& a, std::FILE* out) {
    check_bench_args(a);
    const Checkpoint ck = load_model(a);
    Device device = Device::open(a.runtime.platform, a.runtime.device, a.profile);
    BenchOptions o;
    o.tokens = a.tokens;
    o.context = a.context;
    o.runs = a.runs;
    o.device = device_options(a.runtime, device.info());
    if (a.probe_mib > 0) {  // left out (0): the default size
        const double probe_bytes = a.probe_mib * static_cast<double>(kMiB);
        if (probe_bytes > static_cast<double>(device.info().max_alloc_bytes))
            throw usage_error("--probe-mib: " + format("%g", a.probe_mib) + " MiB is more than " + device.info().name +
                              " allows in one buffer (" + std::to_string(device.info().max_alloc_bytes / kMiB) + " MiB)");
        o.probe_bytes = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(probe_bytes));  // 0 would mean the default
    }
    o.profile = a.profile;
    const BenchResult result = run_benchmark(device, ck, a.synthetic.empty() ? a.checkpoint : "synthetic:" + a.synthetic, o);
    const std::string report = a.json ? format_bench_json(result) : format_bench_text(result);
    std::fputs(report.c_str(), out);
    std::fflush(out);
    return 0;
}

}  // namespace llamacl
