#include "llamacl/bench_report.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "llamacl/bandwidth_probes.hpp"
#include "llamacl/device_forward.hpp"
#include "llamacl/number_text.hpp"

namespace llamacl {

namespace {

std::string format(const char* fmt, auto... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, fmt, args...);
    return buf;
}

double mb(std::uint64_t bytes) { return static_cast<double>(bytes) / 1e6; }
double mb(double bytes) { return bytes / 1e6; }

const char* finalize_name(Finalize f) { return f == Finalize::device ? "device" : "cpu"; }

std::string shape_name(const LaunchShape& s) {
    return (s.ordered ? "exact:" : "") + std::to_string(s.row_threads) + "x" + std::to_string(s.local_size);
}

std::string plan_text(const CapacityPlan& p, bool host_mirror) {
    if (p.resident()) return "all " + std::to_string(p.n_layers) + " layers resident";
    return std::to_string(p.layers_per_offload) + " layers per offload (" + std::to_string(p.chunks()) +
           " chunks per token, weights stream from " +
           (host_mirror ? "a pinned mirror of the layers" : "one pinned buffer refilled per chunk") + ")";
}

// `what` names the timed tokens ("timed tokens", "prefilled prompt positions").
std::string profile_table(const BenchResult& r, const std::vector<CommandProfile>& rows, int tokens,
                          double wall_ms_per_token, const char* what) {
    std::string t = format("\nper command (OpenCL event timestamps, mean over %d %s; %.3f ms wall per token):\n",
                           tokens, what, wall_ms_per_token);
    t += format("  %-22s %9s %12s %8s %12s %9s %10s\n", "command", "per token", "ms/token", "share", "MB/token", "GB/s",
                "GFLOP/s");
    double device_ms = 0;
    for (const CommandProfile& p : rows) {
        t += format("  %-22s %9.2f %12.4f %7.1f%% %12.3f %9.2f %10.2f\n", p.name.c_str(), p.count_per_token,
                    p.ms_per_token, p.share_pct, mb(p.bytes_per_token), p.gbs, p.gflops);
        device_ms += p.ms_per_token;
    }
    const double other = wall_ms_per_token - device_ms;
    t += format("  %-22s %9s %12.4f %7.1f%%   (host work, launch gaps%s)\n", "not in a command", "", other,
                other / wall_ms_per_token * 100, r.plan.resident() ? "" : ", streamed weight uploads");
    return t;
}

// The JSON report keeps its fields in the order written here.
using Json = nlohmann::ordered_json;

Json json_config(const Config& c) {
    return {{"dim", c.dim},
            {"hidden_dim", c.hidden_dim},
            {"n_layers", c.n_layers},
            {"n_heads", c.n_heads},
            {"n_kv_heads", c.n_kv_heads},
            {"vocab_size", c.vocab_size},
            {"seq_len", c.seq_len},
            {"shared_classifier", c.shared_classifier},
            {"weights", element_name(c.weight_format.type)},
            {"group_size", c.weight_format.group_size},
            {"classifier_weights", element_name(c.classifier_format().type)}};
}

Json json_profile(const std::vector<CommandProfile>& rows) {
    Json out = Json::array();
    for (const CommandProfile& p : rows) {
        out.push_back({{"name", p.name},
                       {"count_per_token", p.count_per_token},
                       {"ms_per_token", p.ms_per_token},
                       {"share_pct", p.share_pct},
                       {"bytes_per_token", p.bytes_per_token},
                       {"gbs", p.gbs},
                       {"flops_per_token", p.flops_per_token},
                       {"gflops", p.gflops}});
    }
    return out;
}

// Which --prompt-precision the prompt ran at, and where fast was asked but has nothing to change, why.
std::string prompt_precision_text(const BenchResult& r) {
    if (r.prompt_precision == PromptPrecision::fast)
        return "fast (--prompt-precision fast: one TF32 product per multiply-add of float weights)";
    if (r.prompt_precision_asked == PromptPrecision::exact)
        return "exact (the default; --prompt-precision fast: one TF32 product)";
    const bool integer = r.config.weight_format.quantized();
    return std::string("exact: --prompt-precision fast changes nothing for ") +
           (integer ? "integer formats" : r.prompt_tensor_cores ? "this work shape" : "GEMMs off the tensor cores");
}

}  // namespace

std::string format_bench_text(const BenchResult& r) {
    const Config& c = r.config;
    std::string t;
    t += "device:      " + r.device.name + " (" + r.device.platform_name + ", " + r.device.type + ", driver " +
         r.device.driver_version + ")\n";
    t += "model:       " + r.model +
         format(": dim %d, hidden %d, %d layers, %d/%d heads, vocab %d, seq_len %d, %s weights%s\n", c.dim, c.hidden_dim,
                c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len, c.weight_format.describe().c_str(),
                c.table_format ? (", classifier " + c.table_format->describe()).c_str() : "");
    t += "plan:        " + plan_text(r.plan, r.host_mirror) + "; finalize on " + finalize_name(r.finalize) + "; kernels " +
         shape_name(r.shape) + " (" + r.shape.describe() + ")\n";
    t += "schedule:    " + describe_schedule(r.token_groups, r.per_op_reason) +
         (r.argmax == "device" ? "; greedy decoding on the device" : "; argmax on the host") + "\n";
    std::string runs;
    for (double v : r.run_tok_s) runs += format(" %.2f", v);
    t += format("decode:      %.2f tok/s (%.3f ms/token), median of %s of %s at positions %d..%d; runs:%s\n",
                r.decode_tok_s, 1e3 / r.decode_tok_s, counted(static_cast<long long>(r.run_tok_s.size()), "run").c_str(),
                counted(r.tokens, "token").c_str(), r.context, r.context + r.tokens - 1, runs.c_str());
    if (r.context != r.context_requested)
        t += format("             (--context %d clamped to seq_len - tokens = %d)\n", r.context_requested, r.context);
    t += format("bytes/token: %.3f MB = layer weights %.3f + final norm and classifier %.3f + KV reads %.3f\n",
                mb(r.traffic.total()), mb(r.traffic.layer_weight_bytes), mb(r.traffic.classifier_bytes),
                mb(r.traffic.kv_read_bytes));
    t += format("copy:        %.2f GB/s device copy bandwidth (copy_f32 over %llu MiB, best of %d)\n", r.device_copy_gbs,
                static_cast<unsigned long long>(r.probe_bytes / kMiB), r.probe_reps);
    t += format("achieved:    %.2f GB/s = %.1f%% of the copy bandwidth (roofline)%s\n", r.achieved_gbs, r.roofline_pct,
                r.roofline_capped ? "; capped: the model's bytes stream faster than the copy probe's, from cache" : "");
    if (r.h2d_gbs) {
        t += format("host->device: %.2f GB/s pinned (best of %d); streamed %.3f MB/token = %.2f GB/s = %.1f%% of it\n",
                    *r.h2d_gbs, r.probe_reps,
                    mb(r.uploaded_bytes_per_token), r.upload_gbs, r.upload_gbs / *r.h2d_gbs * 100);
    }
    t += format("per token:   %.2f enqueues, %.2f host waits\n", r.enqueues_per_token, r.waits_per_token);
    if (r.prompt > 0) {
        std::string prompt_runs;
        for (double v : r.run_prompt_tok_s) prompt_runs += format(" %.2f", v);
        const ElementType w = r.config.weight_format.type;
        const std::string gemms_on = r.prompt_tensor_cores
                                         ? "tensor cores (" + tensor_core_name(w, r.prompt_precision) + ")"
                                         : "the portable kernels";
        t += format("prefill:     %.2f tok/s (%.3f ms for %s), median of %s; runs:%s; GEMMs on %s\n", r.prompt_tok_s,
                    r.prompt / r.prompt_tok_s * 1e3, counted(r.prompt, "position").c_str(),
                    counted(static_cast<long long>(r.run_prompt_tok_s.size()), "run").c_str(), prompt_runs.c_str(),
                    gemms_on.c_str());
        t += "precision:   " + prompt_precision_text(r) + "\n";
        // The FMA probe is the SIMT cores' roof; tensor cores are not bound by it.
        t += format("flops:       %.3f GFLOP per prompt; achieved %.2f GFLOP/s = %.1f%% of the FMA throughput "
                    "(%.2f GFLOP/s, fma_f32%s)\n",
                    prefill_flops(r.config, r.prompt) / 1e9, r.prompt_gflops, r.prompt_fma_pct, r.device_fma_gflops,
                    r.prompt_tensor_cores ? ", the SIMT cores' roof, not the tensor cores'" : "");
        // The tensor cores' roof for the prompt's multiply-adds, each taken as its products.
        if (r.prompt_tensor_cores) {
            const MmaOperands operands = tensor_core_operands(w);
            t += format("tensor cores: %.2f G%s/s (%s, best of %d); the prompt at %.1f%% of it, a multiply-add "
                        "taking %d of its products (%s)\n",
                        r.device_mma_gops, operands == MmaOperands::int8 ? "OP" : "FLOP", std::string(mma_probe_signature(operands).kernel).c_str(),
                        r.probe_reps, r.prompt_mma_pct, tensor_core_products(w, r.prompt_precision),
                        tensor_core_name(w, r.prompt_precision).c_str());
        }
    }
    if (r.profiled) {
        t += profile_table(r, r.profile, static_cast<int>(r.run_tok_s.size()) * r.tokens, r.profiled_ms_per_token,
                           "timed tokens");
        if (r.prompt > 0) {
            t += profile_table(r, r.prompt_profile, static_cast<int>(r.run_prompt_tok_s.size()) * r.prompt,
                               r.prompt_profiled_ms_per_token, "prefilled prompt positions");
            if (r.prompt_gemm_gflops > 0)  // (none where the prompt ran position by position)
                t += format("  the GEMMs (gemm*) together: %.2f GFLOP/s = %.1f%% of the FMA throughput%s\n",
                            r.prompt_gemm_gflops, r.prompt_gemm_fma_pct,
                            r.prompt_tensor_cores ? " (the SIMT cores' roof; on tensor cores, not theirs)" : "");
        }
    }
    return t;
}

std::string format_bench_json(const BenchResult& r) {
    Json j;
    j["device"] = r.device.name;
    j["platform"] = r.device.platform_name;
    j["device_type"] = r.device.type;
    j["driver_version"] = r.device.driver_version;
    j["model"] = r.model;
    j["config"] = json_config(r.config);
    j["layers_per_offload"] = r.plan.layers_per_offload;
    j["resident"] = r.plan.resident();
    j["host_mirror"] = r.host_mirror;
    j["chunks_per_token"] = r.plan.chunks();
    j["finalize"] = finalize_name(r.finalize);
    j["work_shape"] = shape_name(r.shape);
    j["schedule"] = r.schedule;
    j["per_op_reason"] = r.per_op_reason;
    j["argmax"] = r.argmax;
    j["tokens"] = r.tokens;
    j["context"] = r.context;
    j["context_requested"] = r.context_requested;
    j["runs"] = static_cast<int>(r.run_tok_s.size());
    j["run_tok_s"] = r.run_tok_s;
    j["decode_tok_s"] = r.decode_tok_s;
    j["ms_per_token"] = 1e3 / r.decode_tok_s;
    j["bytes_per_token"] = r.traffic.total();
    j["bytes_per_token_breakdown"] = {{"layer_weights", r.traffic.layer_weight_bytes},
                                      {"final_norm_and_classifier", r.traffic.classifier_bytes},
                                      {"kv_reads", r.traffic.kv_read_bytes}};
    j["bytes_per_token_definition"] =
        "device reads per token: all layer weights + final RMSNorm and vocab x dim classifier (finalize=device "
        "only) + K and V of positions 0..pos for every layer, averaged over the timed positions";
    j["probe_bytes"] = r.probe_bytes;
    j["probe_reps"] = r.probe_reps;
    j["device_copy_gbs"] = r.device_copy_gbs;
    j["h2d_gbs"] = r.h2d_gbs ? Json(*r.h2d_gbs) : Json(nullptr);
    j["achieved_gbs"] = r.achieved_gbs;
    j["roofline_pct"] = r.roofline_pct;
    j["roofline_capped"] = r.roofline_capped;
    j["uploaded_bytes_per_token"] = r.uploaded_bytes_per_token;
    j["upload_gbs"] = r.upload_gbs;
    j["enqueues_per_token"] = r.enqueues_per_token;
    j["waits_per_token"] = r.waits_per_token;
    j["prompt"] = r.prompt;
    if (r.prompt > 0) {
        j["run_prompt_tok_s"] = r.run_prompt_tok_s;
        j["prompt_tok_s"] = r.prompt_tok_s;
        j["prompt_flops"] = prefill_flops(r.config, r.prompt);
        j["device_fma_gflops"] = r.device_fma_gflops;
        j["prompt_gflops"] = r.prompt_gflops;
        j["prompt_fma_pct"] = r.prompt_fma_pct;
        j["prompt_tensor_cores"] = r.prompt_tensor_cores;
        j["prompt_precision"] = prompt_precision_name(r.prompt_precision);
        j["prompt_precision_asked"] = prompt_precision_name(r.prompt_precision_asked);
        j["device_mma_gops"] = r.prompt_tensor_cores ? Json(r.device_mma_gops) : Json(nullptr);
        j["prompt_mma_pct"] = r.prompt_tensor_cores ? Json(r.prompt_mma_pct) : Json(nullptr);
    }
    j["profiled"] = r.profiled;
    if (r.profiled) {
        j["profiled_ms_per_token"] = r.profiled_ms_per_token;
        j["profile"] = json_profile(r.profile);
        if (r.prompt > 0) {
            j["prompt_profiled_ms_per_token"] = r.prompt_profiled_ms_per_token;
            j["prompt_profile"] = json_profile(r.prompt_profile);
            j["prompt_gemm_gflops"] = r.prompt_gemm_gflops;
            j["prompt_gemm_fma_pct"] = r.prompt_gemm_fma_pct;
        }
    }
    // One line; text that is not UTF-8 (a driver's device name, say) is replaced, not a reason to fail.
    return j.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

}  // namespace llamacl
