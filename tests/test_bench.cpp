// `llama-cl bench`: the byte counts it reports against the model's own sizes (ModelSize), and its JSON
// against what the runtime counts (enqueues, host waits, uploads) for the same tokens. No test asserts a
// speed: CI runs on PoCL on shared machines.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "llamacl/bandwidth_probes.hpp"
#include "llamacl/bench.hpp"
#include "llamacl/bench_command.hpp"
#include "llamacl/bench_report.hpp"
#include "llamacl/device_forward.hpp"
#include "llamacl/error.hpp"
#include "models.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

// The report must be valid JSON; the tests read its fields (at() throws for a missing one).
using Json = nlohmann::json;

// ---- helpers -------------------------------------------------------------------------------------------

Checkpoint in_memory(const Config& c) { return Checkpoint::from_image(synthetic_checkpoint_image(c, 0, 3), "test model"); }

// Small and quick: 4 MiB probes, two runs of a few tokens.
BenchOptions quick_options(int tokens = 4) {
    BenchOptions o;
    o.tokens = tokens;
    o.runs = 2;
    o.probe_bytes = 4 << 20;
    o.probe_reps = 2;
    return o;
}

// K and V rows of positions 0..pos for every layer, summed position by position and averaged: the
// definition written out the long way, independent of the closed form the bench uses.
double kv_reads_per_token(const Config& c, int first, int tokens) {
    double total = 0;
    for (int pos = first; pos < first + tokens; ++pos)
        total += 2.0 * c.n_layers * (pos + 1) * c.kv_dim() * sizeof(float);
    return total / tokens;
}

// What the runtime counts per token over `tokens` steady-state decode tokens at positions from `first`.
RuntimeCounters runtime_counts(Device& device, const Checkpoint& ck, const DeviceOptions& options, int first,
                               int tokens) {
    DeviceForward model(device, ck, options);
    for (int pos = 0; pos <= first; ++pos) model.forward(1, pos);  // the context and a warm-up token
    const RuntimeCounters before = model.counters();
    if (GreedyDecoder* greedy = model.greedy_decoder()) {  // as bench and generate -t 0 decode
        const int forced[] = {7};
        greedy->start(first, forced, first + tokens);
        for (int pos = first; pos < first + tokens; ++pos) greedy->next(pos);
    } else {
        for (int pos = first; pos < first + tokens; ++pos) model.forward(7, pos);
    }
    return model.counters() - before;
}

double per_token(std::uint64_t count, int tokens) { return static_cast<double>(count) / tokens; }

// Greedy decoding's batches for `tokens` positions of a resident model (device_forward.hpp; streamed layers
// take one position a batch): one token read each, and one token kernel launch each on the token schedule.
int greedy_batches(int tokens) { return (tokens + DeviceForward::kGreedyBatch - 1) / DeviceForward::kGreedyBatch; }

const char* const kRequiredFields[] = {"device",          "decode_tok_s", "bytes_per_token",    "device_copy_gbs",
                                       "achieved_gbs",    "roofline_pct", "enqueues_per_token", "waits_per_token"};

}  // namespace

TEST(BenchTraffic, BytesPerTokenAreTheWeightBytesPlusKvReads) {
    // With a shared classifier the device reads exactly the model's weights once per token (the token
    // embedding table is the classifier), plus the KV cache up to each position.
    for (const char* preset : {"tiny", "stories15M", "stories110M", "llama3.2-1b"}) {
        const Config c = *preset_config(preset);
        ASSERT_TRUE(c.shared_classifier);
        const std::pair<int, int> ranges[] = {{0, 1}, {0, 8}, {5, 7}, {c.seq_len - 16, 16}};
        for (const auto& [first, tokens] : ranges) {
            const TokenTraffic t = token_traffic(c, Finalize::device, first, tokens);
            EXPECT_EQ(static_cast<double>(t.total()),
                      static_cast<double>(ModelSize(c).weight_bytes()) + kv_reads_per_token(c, first, tokens))
                << preset << " positions " << first << ".." << first + tokens - 1;
        }
    }
}

TEST(BenchTraffic, UnsharedClassifierAndHostFinalizeCountOnlyWhatTheDeviceReads) {
    // Unshared: the weights include an embedding table of which a token uploads one row and reads
    // nothing on the device. --finalize=cpu: the final norm and classifier are read by the host.
    const Config c = *preset_config("llama2-7b");
    ASSERT_FALSE(c.shared_classifier);
    const std::uint64_t embedding = static_cast<std::uint64_t>(c.vocab_size) * c.dim * sizeof(float);
    const TokenTraffic device = token_traffic(c, Finalize::device, 100, 10);
    EXPECT_EQ(static_cast<double>(device.total()),
              static_cast<double>(ModelSize(c).weight_bytes() - embedding) + kv_reads_per_token(c, 100, 10));
    const TokenTraffic host = token_traffic(c, Finalize::cpu, 100, 10);
    EXPECT_EQ(host.classifier_bytes, 0u);
    EXPECT_EQ(host.total(), ModelSize(c).layer_bytes() * c.n_layers + host.kv_read_bytes);
}

TEST(BenchTraffic, PerCommandBytesSplitTheTokenExactly) {
    const Config c = small_config(2, false);
    for (const Finalize f : {Finalize::device, Finalize::cpu}) {
        std::uint64_t kernels = 0;
        for (const char* name : {"attn_qkv_rope", "attention", "matvec_residual(wo)", "ffn_gate_up",
                                 "matvec_residual(w2)", "classifier"})
            kernels += command_bytes_per_token(name, c, f, 3, 9);
        EXPECT_EQ(kernels, token_traffic(c, f, 3, 9).total());
    }
    EXPECT_EQ(command_bytes_per_token("read_logits", c, Finalize::device, 0, 1), c.vocab_size * sizeof(float));
    EXPECT_EQ(command_bytes_per_token("no_such_command", c, Finalize::device, 0, 1), 0u);
}

// 2 FLOPs per multiply-add of every matrix and of attention's dot products over the cached positions;
// forward_token's the sum of the kernels'.
TEST(BenchTraffic, PerCommandFlopsCountTheMultiplyAdds) {
    const Config c = small_config(2, false);
    const std::uint64_t layers = c.n_layers, dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim();
    EXPECT_EQ(command_flops_per_token("attn_qkv_rope", c, Finalize::device, 0, 1), layers * 2 * (dim * dim + 2 * kv * dim));
    EXPECT_EQ(command_flops_per_token("matvec_residual(wo)", c, Finalize::device, 0, 1), layers * 2 * dim * dim);
    EXPECT_EQ(command_flops_per_token("ffn_gate_up", c, Finalize::device, 0, 1), layers * 4 * hidden * dim);
    EXPECT_EQ(command_flops_per_token("matvec_residual(w2)", c, Finalize::device, 0, 1), layers * 2 * hidden * dim);
    // Positions 3..11 (9 tokens from 3): mean cached length 8, query x key and weight x value per element.
    EXPECT_EQ(command_flops_per_token("attention", c, Finalize::device, 3, 9), layers * 4 * dim * 8);
    EXPECT_EQ(command_flops_per_token("classifier", c, Finalize::device, 0, 1), 2ull * c.vocab_size * dim);
    EXPECT_EQ(command_flops_per_token("classifier", c, Finalize::cpu, 0, 1), 0u);
    for (const Finalize f : {Finalize::device, Finalize::cpu}) {
        std::uint64_t kernels = 0;
        for (const char* name : {"attn_qkv_rope", "attention", "matvec_residual(wo)", "ffn_gate_up",
                                 "matvec_residual(w2)", "classifier"})
            kernels += command_flops_per_token(name, c, f, 3, 9);
        EXPECT_EQ(kernels, command_flops_per_token("forward_token", c, f, 3, 9));
    }
    EXPECT_EQ(command_flops_per_token("read_logits", c, Finalize::device, 0, 1), 0u);
}

// A prompt's commands split its whole: their bytes and flops per position, times the positions, are
// prefill_bytes() and prefill_flops(), for the fused products (float weights) and the single ones (Q8_0),
// one batch or several; the transfers keep their own sizes.
TEST(BenchTraffic, PrefillCommandsSplitThePromptExactly) {
    const std::vector<std::string> fused = {"rmsnorm_rows", "gemm_qkv_rope", "attention_tiles", "gemm(wo)",
                                            "gemm_gate_up", "gemm(w2)", "classifier"};
    const std::vector<std::string> single = {"rmsnorm_rows", "gemm(wq)", "gemm(wk)", "gemm(wv)", "attention_rows",
                                             "gemm(wo)", "gemm(w1)", "gemm(w3)", "gemm(w2)", "classifier"};
    Config q8 = small_config(2, false);
    q8.weight_format = WeightFormat{ElementType::q8_0, 4};
    for (const Config& c : {small_config(2, false), q8}) {
        for (const int batch : {40, 7}) {
            const int prompt = 33;
            for (const auto& names : {fused, single}) {
                double bytes = 0, flops = 0;
                for (const std::string& name : names) {
                    bytes += prefill_command_bytes(name, c, prompt, batch);
                    flops += prefill_command_flops(name, c, prompt);
                }
                EXPECT_NEAR(bytes * prompt, prefill_bytes(c, prompt, batch), 1e-6 * prefill_bytes(c, prompt, batch))
                    << names[1] << " batch " << batch;
                EXPECT_NEAR(flops * prompt, prefill_flops(c, prompt), 1e-6 * prefill_flops(c, prompt)) << names[1];
            }
        }
    }
    const Config c = small_config();  // dim 48, hidden 100, kv_dim 16, 3 layers, vocab 300
    // Five batches of 7 read each layer's weights five times, e.g. w2's 100 x 48 floats; attention reads
    // the K and V rows of positions 0..p, 17 on average; the classifier's 300 x 48 and the final norm once.
    const double batches = 3.0 * 5 / 33;
    const std::pair<const char*, double> rows[] = {{"gemm_qkv_rope", 80}, {"gemm(wq)", 48}, {"gemm(wk)", 16},
                                                   {"gemm(wv)", 16},      {"gemm(wo)", 48}, {"gemm_gate_up", 200},
                                                   {"gemm(w1)", 100},     {"gemm(w3)", 100}, {"gemm(w2)", 100}};
    for (const auto& [name, matrix_rows] : rows) {
        EXPECT_DOUBLE_EQ(prefill_command_bytes(name, c, 33, 7), batches * matrix_rows * 48 * 4) << name;
        EXPECT_DOUBLE_EQ(prefill_command_flops(name, c, 33), 3.0 * 2 * matrix_rows * 48) << name;
    }
    EXPECT_DOUBLE_EQ(prefill_command_bytes("rmsnorm_rows", c, 33, 7), batches * 2 * 48 * 4);
    for (const char* attention : {"attention_rows", "attention_tiles"}) {
        EXPECT_DOUBLE_EQ(prefill_command_bytes(attention, c, 33, 7), 3.0 * 2 * 16 * 4 * 17);
        EXPECT_DOUBLE_EQ(prefill_command_flops(attention, c, 33), 3.0 * 4 * 48 * 17);
    }
    EXPECT_DOUBLE_EQ(prefill_command_bytes("classifier", c, 33, 7), (300.0 * 48 + 48) * 4 / 33);
    EXPECT_DOUBLE_EQ(prefill_command_flops("classifier", c, 33), 2.0 * 300 * 48 / 33);
    EXPECT_DOUBLE_EQ(prefill_command_bytes("write_embeddings", c, 33, 7), 48.0 * 4);
    EXPECT_DOUBLE_EQ(prefill_command_bytes("read_logits", c, 33, 7), 300.0 * 4 / 33);
    EXPECT_EQ(prefill_command_flops("swiglu", c, 33), 0);
    EXPECT_TRUE(is_gemm_command("gemm_gate_up"));
    EXPECT_TRUE(is_gemm_command("gemm(wq)"));
    EXPECT_FALSE(is_gemm_command("attention_tiles"));
}

TEST(BenchRun, JsonFieldsAgreeWithTheRuntimesCounters) {
    const Config c = small_config();  // 3 layers, resident
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "");
    const BenchOptions o = quick_options(5);
    const BenchResult r = run_benchmark(device, ck, "small", o);
    const Json j = Json::parse(format_bench_json(r));

    for (const char* field : kRequiredFields) EXPECT_TRUE(j.contains(field)) << field;
    EXPECT_EQ(j.at("device").get<std::string>(), device.info().name);
    EXPECT_EQ(j.at("tokens").get<double>(), 5);
    EXPECT_EQ(j.at("context").get<double>(), 0);
    EXPECT_TRUE(j.at("resident").get<bool>());
    EXPECT_TRUE(j.at("h2d_gbs").is_null()) << "host-to-device bandwidth is probed only when weights stream";

    EXPECT_EQ(j.at("bytes_per_token").get<double>(),
              static_cast<double>(ModelSize(c).weight_bytes()) + kv_reads_per_token(c, 0, 5));
    const Json& parts = j.at("bytes_per_token_breakdown");
    EXPECT_EQ(parts.at("layer_weights").get<double>() + parts.at("final_norm_and_classifier").get<double>() +
                  parts.at("kv_reads").get<double>(),
              j.at("bytes_per_token").get<double>());

    const RuntimeCounters counted = runtime_counts(device, ck, o.device, 0, 5);
    EXPECT_EQ(j.at("enqueues_per_token").get<double>(), per_token(counted.enqueues, 5));
    EXPECT_EQ(j.at("waits_per_token").get<double>(), per_token(counted.host_waits, 5));
    // The schedules in device_forward.hpp. The small model's classifier is the embedding table, so bench
    // decodes greedily on the device: per token 5 kernels per layer, the final norm on its own for CPU
    // shapes, the classifier and the two argmax kernels; or per batch of tokens one token kernel launch;
    // per batch the tokens' read, and once per run the first token's embedding write. The read is the one
    // host wait.
    ASSERT_EQ(j.at("argmax").get<std::string>(), "device");
    const int final_norm = r.shape.row_threads == 1 ? 1 : 0, batches = greedy_batches(5);
    if (j.at("schedule").get<std::string>() == "token") {
        EXPECT_EQ(j.at("per_op_reason").get<std::string>(), "");
        EXPECT_EQ(j.at("enqueues_per_token").get<double>(), (1 + 2 * batches) / 5.0);
    } else {
        EXPECT_EQ(j.at("schedule").get<std::string>(), "per-op");
        EXPECT_NE(j.at("per_op_reason").get<std::string>(), "") << "the per-op schedule says why";
        EXPECT_EQ(j.at("enqueues_per_token").get<double>(),
                  (1 + 5 * (5 * c.n_layers + final_norm + 1 + 2) + batches) / 5.0);
    }
    EXPECT_EQ(j.at("waits_per_token").get<double>(), batches / 5.0);
    EXPECT_EQ(j.at("uploaded_bytes_per_token").get<double>(), 0);

    // The derived numbers follow from the measured ones (to the 10 digits the JSON prints).
    ASSERT_EQ(j.at("run_tok_s").size(), 2u);
    const double median = (j.at("run_tok_s").at(0).get<double>() + j.at("run_tok_s").at(1).get<double>()) / 2;
    EXPECT_NEAR(j.at("decode_tok_s").get<double>(), median, median * 1e-9);
    const double achieved = j.at("bytes_per_token").get<double>() * j.at("decode_tok_s").get<double>() / 1e9;
    EXPECT_NEAR(j.at("achieved_gbs").get<double>(), achieved, achieved * 1e-9);
    const double pct = std::min(100.0, achieved / j.at("device_copy_gbs").get<double>() * 100);
    EXPECT_NEAR(j.at("roofline_pct").get<double>(), pct, pct * 1e-9);
    EXPECT_EQ(j.at("roofline_capped").get<bool>(), achieved > j.at("device_copy_gbs").get<double>());
    EXPECT_GT(j.at("device_copy_gbs").get<double>(), 0);
    EXPECT_FALSE(j.at("profiled").get<bool>());
    EXPECT_FALSE(j.contains("profile"));
}

TEST(BenchRun, StreamingCountsChunkWaitsUploadsAndProbesHostToDevice) {
    const Config c = small_config(6, false);  // 3 layers, unshared classifier
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "");
    BenchOptions o = quick_options(3);
    o.context = 4;
    o.device.layers_per_offload = 2;  // 2 chunks per token
    o.device.host_mirror = false;     // one pinned buffer refilled per chunk
    const Json j = Json::parse(format_bench_json(run_benchmark(device, ck, "small", o)));

    EXPECT_FALSE(j.at("resident").get<bool>());
    EXPECT_FALSE(j.at("host_mirror").get<bool>());
    EXPECT_EQ(j.at("chunks_per_token").get<double>(), 2);
    EXPECT_FALSE(j.at("h2d_gbs").is_null());
    const RuntimeCounters counted = runtime_counts(device, ck, o.device, 4, 3);
    EXPECT_EQ(j.at("enqueues_per_token").get<double>(), per_token(counted.enqueues, 3));
    EXPECT_EQ(j.at("waits_per_token").get<double>(), per_token(counted.host_waits, 3));
    EXPECT_EQ(j.at("waits_per_token").get<double>(), 1 + 2) << "the logits read and one wait per streamed chunk";
    EXPECT_EQ(j.at("uploaded_bytes_per_token").get<double>(), static_cast<double>(ModelSize(c).layer_bytes() * c.n_layers));
    const std::uint64_t embedding = static_cast<std::uint64_t>(c.vocab_size) * c.dim * sizeof(float);
    EXPECT_EQ(j.at("bytes_per_token").get<double>(),
              static_cast<double>(ModelSize(c).weight_bytes() - embedding) + kv_reads_per_token(c, 4, 3));
}

TEST(BenchRun, AMirroredModelStreamsWithOneWaitPerToken) {
    const Config c = small_config(6, false);
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "");
    BenchOptions o = quick_options(3);
    o.device.layers_per_offload = 1;
    const Json j = Json::parse(format_bench_json(run_benchmark(device, ck, "small", o)));
    EXPECT_TRUE(j.at("host_mirror").get<bool>()) << "a few KB of layers fit half of any machine's memory";
    const RuntimeCounters counted = runtime_counts(device, ck, o.device, 0, 3);
    EXPECT_EQ(j.at("waits_per_token").get<double>(), per_token(counted.host_waits, 3));
    EXPECT_EQ(j.at("waits_per_token").get<double>(), 1) << "only the logits read";
    EXPECT_EQ(j.at("uploaded_bytes_per_token").get<double>(), static_cast<double>(ModelSize(c).layer_bytes() * c.n_layers));
}

TEST(BenchRun, ContextIsClampedSoTheTimedTokensEndAtSeqLen) {
    const Config c = small_config();  // seq_len 40
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "");
    BenchOptions o = quick_options(4);
    o.context = 1000;
    const BenchResult r = run_benchmark(device, ck, "small", o);
    EXPECT_EQ(r.context_requested, 1000);
    EXPECT_EQ(r.context, c.seq_len - 4);
    EXPECT_EQ(static_cast<double>(r.traffic.kv_read_bytes), kv_reads_per_token(c, c.seq_len - 4, 4));
    EXPECT_NE(format_bench_text(r).find("clamped"), std::string::npos);
}

TEST(BenchRun, BadCountsAreUsageErrors) {
    const Config c = small_config();
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "");
    const auto usage_message = [&](const BenchOptions& o) -> std::string {
        try {
            run_benchmark(device, ck, "small", o);
        } catch (const Error& e) {
            EXPECT_EQ(e.exit_code(), 2) << e.what();
            return e.what();
        }
        ADD_FAILURE() << "no error";
        return "";
    };
    BenchOptions o = quick_options(0);
    EXPECT_NE(usage_message(o).find("-n"), std::string::npos);
    o.tokens = c.seq_len + 1;
    EXPECT_NE(usage_message(o).find("seq_len (40)"), std::string::npos);
    o = quick_options();
    o.context = -1;
    EXPECT_NE(usage_message(o).find("--context"), std::string::npos);
    o = quick_options();
    o.runs = 0;
    EXPECT_NE(usage_message(o).find("--runs"), std::string::npos);
    o = quick_options();
    o.profile = true;  // the queue was opened without profiling
    try {
        run_benchmark(device, ck, "small", o);
        ADD_FAILURE() << "--profile without a profiling queue must fail";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("profiling"), std::string::npos) << e.what();
    }
}

TEST(BenchProfile, EveryCommandOfTheScheduleIsTimedWithItsBytes) {
    const Config c = small_config();
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "", /*profiling=*/true);
    BenchOptions o = quick_options(3);
    o.profile = true;
    const BenchResult r = run_benchmark(device, ck, "small", o);
    ASSERT_TRUE(r.profiled);

    // Greedy decoding on the device (the model's classifier is its embedding table): the first token's
    // embedding is written once per run of 3 tokens, then each token's commands (or a batch's token kernel
    // launch), then a batch's read.
    ASSERT_EQ(r.argmax, "device");
    const double batches_per_token = greedy_batches(3) / 3.0;
    std::vector<std::pair<std::string, double>> schedule = {{"write_embedding", 1.0 / 3}};
    if (r.schedule == "token") {
        schedule.emplace_back("forward_token", batches_per_token);
    } else {
        schedule.insert(schedule.end(), {{"attn_qkv_rope", c.n_layers}, {"attention", c.n_layers},
                                         {"matvec_residual(wo)", c.n_layers}, {"ffn_gate_up", c.n_layers},
                                         {"matvec_residual(w2)", c.n_layers}});
        if (r.shape.row_threads == 1) schedule.emplace_back("rmsnorm(final)", 1);  // CPU shapes
        schedule.insert(schedule.end(), {{"classifier", 1}, {"argmax", 1}, {"argmax_embed", 1}});
    }
    schedule.emplace_back("read_tokens", batches_per_token);
    ASSERT_EQ(r.profile.size(), schedule.size());
    double kernel_bytes = 0;
    double commands = 0;
    for (std::size_t i = 0; i < schedule.size(); ++i) {
        const CommandProfile& p = r.profile[i];
        EXPECT_EQ(p.name, schedule[i].first);
        EXPECT_EQ(p.count_per_token, schedule[i].second) << p.name;
        EXPECT_GE(p.ms_per_token, 0) << p.name;
        commands += p.count_per_token;
        // The embedding row and the token are the token's input and output, not weights.
        if (p.name != "write_embedding" && p.name != "argmax_embed" && p.name != "read_tokens")
            kernel_bytes += p.bytes_per_token;
    }
    EXPECT_EQ(kernel_bytes, static_cast<double>(r.traffic.total())) << "the kernels' bytes are the token's bytes";
    EXPECT_DOUBLE_EQ(commands, r.enqueues_per_token) << "every enqueued command is in the profile";

    const Json j = Json::parse(format_bench_json(r));
    ASSERT_EQ(j.at("profile").size(), schedule.size());
    EXPECT_EQ(j.at("profile").at(1).at("name").get<std::string>(), schedule[1].first);
    EXPECT_NE(format_bench_text(r).find(schedule[schedule.size() - 2].first), std::string::npos);
}

TEST(BenchProfile, HostFinalizeReadsTheHiddenStateAndRunsNoClassifier) {
    const Config c = small_config();
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "", /*profiling=*/true);
    BenchOptions o = quick_options(2);
    o.profile = true;
    o.device.finalize = Finalize::cpu;
    const BenchResult r = run_benchmark(device, ck, "small", o);
    ASSERT_FALSE(r.profile.empty());
    EXPECT_EQ(r.profile.back().name, "read_hidden");
    for (const CommandProfile& p : r.profile) EXPECT_NE(p.name, "classifier");
    EXPECT_EQ(r.traffic.classifier_bytes, 0u);
    EXPECT_EQ(r.waits_per_token, 1);
}

// ---- the reports of a result built by hand: no device needed ---------------------------------------

namespace {

BenchResult sample_result() {
    BenchResult r;
    r.device.name = "Device \xff";  // not UTF-8, as a driver may report it
    r.device.platform_name = "Platform";
    r.device.type = "GPU";
    r.device.driver_version = "1.0";
    r.model = "model.bin";
    r.config = small_config();
    r.plan.n_layers = r.config.n_layers;
    r.plan.layers_per_offload = 1;
    r.shape.row_threads = 32;
    r.shape.local_size = 256;
    r.host_mirror = true;
    r.schedule = "per-op";
    r.per_op_reason = "\"streamed\" layers";
    r.argmax = "host";
    r.tokens = 4;
    r.context = 10;
    r.context_requested = 100;
    r.run_tok_s = {10.5, 12.25};
    r.decode_tok_s = 11.25;
    r.traffic = token_traffic(r.config, r.finalize, r.context, r.tokens);
    r.probe_bytes = 4 * kMiB;
    r.probe_reps = 2;
    r.device_copy_gbs = 0;
    r.h2d_gbs = 3.5;
    r.achieved_gbs = 1.5;
    r.roofline_pct = r.achieved_gbs / r.device_copy_gbs * 100;  // inf: no copy bandwidth measured
    r.enqueues_per_token = 20.25;
    r.waits_per_token = 3;
    r.uploaded_bytes_per_token = 1e6;
    r.upload_gbs = 0.5;
    r.profiled = true;
    r.profiled_ms_per_token = 2;
    r.profile = {{"classifier", 1, 0.5, 25, 4096, 8.192}};
    return r;
}

}  // namespace

TEST(BenchReport, JsonHasEveryFieldInItsOrder) {
    const BenchResult r = sample_result();
    const std::string text = format_bench_json(r);
    ASSERT_EQ(text.back(), '\n');
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    std::vector<std::string> keys;
    for (const auto& item : j.items()) keys.push_back(item.key());
    const std::vector<std::string> expected = {
        "device", "platform", "device_type", "driver_version", "model", "config", "layers_per_offload", "resident",
        "host_mirror", "chunks_per_token", "finalize", "work_shape", "schedule", "per_op_reason", "argmax", "tokens",
        "context", "context_requested", "runs", "run_tok_s", "decode_tok_s", "ms_per_token", "bytes_per_token",
        "bytes_per_token_breakdown", "bytes_per_token_definition", "probe_bytes", "probe_reps", "device_copy_gbs",
        "h2d_gbs", "achieved_gbs", "roofline_pct", "roofline_capped", "uploaded_bytes_per_token", "upload_gbs",
        "enqueues_per_token", "waits_per_token", "prompt", "profiled", "profiled_ms_per_token", "profile"};
    EXPECT_EQ(keys, expected);
    std::vector<std::string> config_keys;
    for (const auto& item : j.at("config").items()) config_keys.push_back(item.key());
    EXPECT_EQ(config_keys, (std::vector<std::string>{"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads",
                                                     "vocab_size", "seq_len", "shared_classifier", "weights",
                                                     "group_size", "classifier_weights"}));

    EXPECT_EQ(j.at("device"), "Device \xef\xbf\xbd") << "invalid UTF-8 is replaced by U+FFFD";
    EXPECT_EQ(j.at("per_op_reason"), "\"streamed\" layers");
    EXPECT_EQ(j.at("config").at("n_layers"), r.config.n_layers);
    EXPECT_EQ(j.at("config").at("shared_classifier"), r.config.shared_classifier);
    EXPECT_EQ(j.at("config").at("weights"), "f32");
    EXPECT_EQ(j.at("config").at("classifier_weights"), "f32");
    EXPECT_EQ(j.at("layers_per_offload"), 1);
    EXPECT_EQ(j.at("resident"), false);
    EXPECT_EQ(j.at("chunks_per_token"), r.config.n_layers);
    EXPECT_EQ(j.at("finalize"), "device");
    EXPECT_EQ(j.at("work_shape"), "32x256");
    EXPECT_EQ(j.at("runs"), 2);
    EXPECT_EQ(j.at("run_tok_s"), (nlohmann::ordered_json{10.5, 12.25}));
    EXPECT_EQ(j.at("decode_tok_s"), 11.25);
    EXPECT_DOUBLE_EQ(j.at("ms_per_token").get<double>(), 1e3 / 11.25);
    EXPECT_EQ(j.at("bytes_per_token"), r.traffic.total());
    EXPECT_EQ(j.at("bytes_per_token_breakdown").at("kv_reads"), r.traffic.kv_read_bytes);
    EXPECT_EQ(j.at("probe_bytes"), 4 * kMiB);
    EXPECT_EQ(j.at("h2d_gbs"), 3.5);
    EXPECT_TRUE(j.at("roofline_pct").is_null()) << "a non-finite number is null";
    EXPECT_EQ(j.at("enqueues_per_token"), 20.25);
    ASSERT_EQ(j.at("profile").size(), 1u);
    std::vector<std::string> row_keys;
    for (const auto& item : j.at("profile").at(0).items()) row_keys.push_back(item.key());
    EXPECT_EQ(row_keys, (std::vector<std::string>{"name", "count_per_token", "ms_per_token", "share_pct",
                                                  "bytes_per_token", "gbs", "flops_per_token", "gflops"}));
    EXPECT_EQ(j.at("profile").at(0).at("name"), "classifier");
    EXPECT_EQ(j.at("profile").at(0).at("bytes_per_token"), 4096);
}

TEST(BenchReport, JsonLeavesOutWhatWasNotMeasured) {
    BenchResult r = sample_result();
    r.h2d_gbs.reset();
    r.profiled = false;
    r.profile.clear();
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(format_bench_json(r));
    EXPECT_TRUE(j.at("h2d_gbs").is_null());
    EXPECT_EQ(j.at("profiled"), false);
    EXPECT_FALSE(j.contains("profiled_ms_per_token"));
    EXPECT_FALSE(j.contains("profile"));
}

TEST(BenchReport, TextHasTheSameFigures) {
    const std::string text = format_bench_text(sample_result());
    for (const char* expect : {"decode:      11.25 tok/s", "runs: 10.50 12.25", "--context 100 clamped",
                               "1 layers per offload", "host->device: 3.50 GB/s", "per token:   20.25 enqueues",
                               "classifier"})
        EXPECT_NE(text.find(expect), std::string::npos) << expect << "\n" << text;
}

// A prompt on tensor cores: its rate against the probe of the instruction its GEMMs issue, each
// multiply-add taken as that instruction's products (3xTF32 for f32 weights, 2 for f16, int8 for Q8_0).
TEST(BenchReport, APromptOnTensorCoresIsAShareOfTheirProbe) {
    BenchResult r = sample_result();
    r.prompt = 512;
    r.run_prompt_tok_s = {1000};
    r.prompt_tok_s = 1000;
    r.device_fma_gflops = 60000;
    r.prompt_gflops = 25000;
    r.prompt_fma_pct = 41.5;
    r.prompt_tensor_cores = true;
    r.device_mma_gops = 300000;
    r.prompt_mma_pct = 25;
    const std::string text = format_bench_text(r);
    for (const char* expect : {"GEMMs on tensor cores (3xTF32)", "of the FMA throughput (60000.00 GFLOP/s, fma_f32, "
                               "the SIMT cores' roof, not the tensor cores')",
                               "tensor cores: 300000.00 GFLOP/s (mma_tf32, best of 2); the prompt at 25.0% of it, a "
                               "multiply-add taking 3 of its products (3xTF32)"})
        EXPECT_NE(text.find(expect), std::string::npos) << expect << "\n" << text;
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(format_bench_json(r));
    EXPECT_EQ(j.at("device_mma_gops"), 300000);
    EXPECT_EQ(j.at("prompt_mma_pct"), 25);

    r.config.weight_format = WeightFormat{ElementType::q8_0, 32};
    const std::string q8 = format_bench_text(r);
    for (const char* expect : {"GEMMs on tensor cores (int8)", "300000.00 GOP/s (mma_s8, best of 2)",
                               "taking 1 of its products (int8)"})
        EXPECT_NE(q8.find(expect), std::string::npos) << expect << "\n" << q8;
    EXPECT_EQ(tensor_core_products(ElementType::f16), 2);
}

// --prompt-precision: the report says which precision the prompt ran at, and where fast was asked but had
// nothing to change, that it ran exact; fast's multiply-add is one TF32 product for f32 and f16 weights.
TEST(BenchReport, ThePromptsPrecisionLabelsItsFigures) {
    BenchResult r = sample_result();
    r.prompt = 512;
    r.run_prompt_tok_s = {1000};
    r.prompt_tok_s = 1000;
    r.prompt_tensor_cores = true;
    r.device_mma_gops = 300000;
    r.prompt_mma_pct = 25;
    const std::string exact = format_bench_text(r);
    EXPECT_NE(exact.find("precision:   exact (the default"), std::string::npos) << exact;
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(format_bench_json(r));
    EXPECT_EQ(j.at("prompt_precision"), "exact");
    EXPECT_EQ(j.at("prompt_precision_asked"), "exact");

    r.prompt_precision_asked = r.prompt_precision = PromptPrecision::fast;
    const std::string fast = format_bench_text(r);
    for (const char* expect : {"precision:   fast (--prompt-precision fast", "GEMMs on tensor cores (1xTF32)",
                               "taking 1 of its products (1xTF32)"})
        EXPECT_NE(fast.find(expect), std::string::npos) << expect << "\n" << fast;
    j = nlohmann::ordered_json::parse(format_bench_json(r));
    EXPECT_EQ(j.at("prompt_precision"), "fast");
    EXPECT_EQ(j.at("prompt_precision_asked"), "fast");
    for (const ElementType type : {ElementType::f32, ElementType::f16, ElementType::q8_0, ElementType::q4_0})
        EXPECT_EQ(tensor_core_products(type, PromptPrecision::fast), 1) << element_name(type);
    EXPECT_EQ(tensor_core_name(ElementType::q8_0, PromptPrecision::fast), "int8");

    // Asked, without effect: integer formats, and GEMMs off the tensor cores.
    r.prompt_precision = PromptPrecision::exact;
    r.config.weight_format = WeightFormat{ElementType::q8_0, 32};
    EXPECT_NE(format_bench_text(r).find("exact: --prompt-precision fast changes nothing for integer formats"),
              std::string::npos);
    r.config.weight_format = WeightFormat{};
    r.prompt_tensor_cores = false;
    EXPECT_NE(format_bench_text(r).find("exact: --prompt-precision fast changes nothing for GEMMs off the tensor cores"),
              std::string::npos);
    j = nlohmann::ordered_json::parse(format_bench_json(r));
    EXPECT_EQ(j.at("prompt_precision"), "exact");
    EXPECT_EQ(j.at("prompt_precision_asked"), "fast");
}

// The bench subcommand as the CLI parses it (run_cli adds it with add_bench_command).
namespace {

struct CliRun {
    int exit_code;
    std::string out;
};

CliRun run_bench_cli(const std::string& command_line) {
    CLI::App app{"test", "llama-cl"};
    BenchArgs args;
    add_bench_command(app, args);
    app.parse(command_line, /*program_name_included=*/false);
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::tmpfile(), std::fclose);
    const int code = run_bench(args, out.get());
    std::rewind(out.get());
    std::string text;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, out.get())) > 0;) text.append(buf, n);
    return {code, text};
}

}  // namespace

TEST(BenchCli, SyntheticPresetJsonAndText) {
    const CliRun json = run_bench_cli("bench --synthetic tiny -n 3 --runs 1 --probe-mib 4 --work-shape 4x16 --json");
    EXPECT_EQ(json.exit_code, 0);
    const Json j = Json::parse(json.out);
    EXPECT_EQ(j.at("model").get<std::string>(), "synthetic:tiny");
    EXPECT_EQ(j.at("work_shape").get<std::string>(), "4x16") << "--work-shape reaches the kernels";
    EXPECT_EQ(j.at("tokens").get<double>(), 3);
    EXPECT_EQ(j.at("config").at("dim").get<double>(), preset_config("tiny")->dim);
    EXPECT_EQ(j.at("probe_bytes").get<double>(), 4 << 20);

    const CliRun text = run_bench_cli("bench --synthetic tiny -n 2 --runs 1 --probe-mib 4 --layers-per-offload 1");
    EXPECT_EQ(text.exit_code, 0);
    for (const char* part : {"tok/s", "bytes/token", "roofline", "host waits", "host->device"})
        EXPECT_NE(text.out.find(part), std::string::npos) << part << " in:\n" << text.out;
}

// --prompt-precision reaches the runtime, and the report says what ran: on a device without tensor cores
// (PoCL) fast has nothing to change.
TEST(BenchCli, PromptPrecisionIsReported) {
    const CliRun run = run_bench_cli("bench --synthetic tiny -n 1 --runs 1 --probe-mib 4 --prompt 8 --json "
                                     "--prompt-precision fast");
    ASSERT_EQ(run.exit_code, 0);
    const Json j = Json::parse(run.out);
    EXPECT_EQ(j.at("prompt_precision_asked").get<std::string>(), "fast");
    EXPECT_EQ(j.at("prompt_precision").get<std::string>(), j.at("prompt_tensor_cores").get<bool>() ? "fast" : "exact");
}

TEST(BenchCli, NoHostMirrorRefillsOnePinnedBufferPerChunk) {
    const Config tiny = *preset_config("tiny");
    for (const bool mirror : {true, false}) {
        const CliRun run = run_bench_cli(std::string("bench --synthetic tiny -n 2 --runs 1 --probe-mib 4 "
                                                     "--layers-per-offload 1 --json") +
                                         (mirror ? "" : " --no-host-mirror"));
        EXPECT_EQ(run.exit_code, 0);
        const Json j = Json::parse(run.out);
        EXPECT_EQ(j.at("host_mirror").get<bool>(), mirror);
        // each token's read (streamed layers go one position a batch), and without the mirror one wait per
        // chunk (one layer each)
        EXPECT_EQ(j.at("waits_per_token").get<double>(), mirror ? 1 : 1 + tiny.n_layers);
    }
}

TEST(BenchCli, ModelSourceIsCheckedBeforeAnythingRuns) {
    for (const char* line : {"bench", "bench model.bin --synthetic tiny", "bench --synthetic huge"}) {
        try {
            run_bench_cli(line);
            ADD_FAILURE() << line << ": no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.exit_code(), 2) << line;
            EXPECT_NE(std::string(e.what()).find("stories15M"), std::string::npos) << "lists the presets: " << e.what();
        }
    }
}

TEST(BenchCli, WithoutProbeMibTheProbeHasItsDefaultSize) {
    const CliRun run = run_bench_cli("bench --synthetic tiny -n 1 --runs 1 --json");
    ASSERT_EQ(run.exit_code, 0);
    const Device device = Device::open("", "");
    EXPECT_EQ(Json::parse(run.out).at("probe_bytes").get<double>(), static_cast<double>(default_probe_bytes(device.info())));
}

TEST(BenchProbe, TheDefaultSizeIsSeveralTimesTheLastLevelCache) {
    DeviceInfo cpu;
    cpu.is_cpu = true;
    cpu.max_alloc_bytes = cpu.global_mem_bytes = std::uint64_t{64} << 30;
    cpu.global_cache_bytes = 32 * kMiB;
    EXPECT_EQ(default_probe_bytes(cpu), kCacheMultiple * 32 * kMiB);
    cpu.global_cache_bytes = kMiB;  // a small cache: the floor
    EXPECT_EQ(default_probe_bytes(cpu), kMinProbeBytes);
    cpu.global_cache_bytes = 1024 * kMiB;  // a huge one: at most 1 GiB
    EXPECT_EQ(default_probe_bytes(cpu), 1024 * kMiB);
    cpu.global_cache_bytes = 0;  // not reported: 1 GiB, as before the cache was asked
    EXPECT_EQ(default_probe_bytes(cpu), 1024 * kMiB);
    cpu.global_cache_bytes = 32 * kMiB;
    cpu.global_mem_bytes = 512 * kMiB;  // the two buffers stay within half of the device's memory
    EXPECT_EQ(default_probe_bytes(cpu), 128 * kMiB);
}

TEST(BenchReport, TheRooflineShareNeverReadsAboveAHundredPercent) {
    EXPECT_DOUBLE_EQ(roofline_share(1.0, 4.0), 25.0);
    EXPECT_DOUBLE_EQ(roofline_share(4.0, 4.0), 100.0);
    EXPECT_DOUBLE_EQ(roofline_share(5.2, 4.0), 100.0);  // cache-resident weights beat the copy probe
    EXPECT_DOUBLE_EQ(roofline_share(1.0, 0.0), 100.0);
    BenchResult r = sample_result();
    EXPECT_EQ(format_bench_text(r).find("capped"), std::string::npos);
    r.roofline_capped = true;
    EXPECT_NE(format_bench_text(r).find("(roofline); capped: the model's bytes stream faster than the copy probe's"),
              std::string::npos);
}

TEST(BenchCli, SizesMustBePositiveFiniteAndFitTheDevice) {
    for (const char* flag : {"--probe-mib", "--max-device-memory"}) {
        for (const char* value : {"0", "-1", "nan", "inf", "abc"}) {
            const std::string line = std::string("bench --synthetic tiny -n 2 --runs 1 ") + flag + " " + value;
            try {
                run_bench_cli(line);
                ADD_FAILURE() << line << ": no error";
            } catch (const CLI::ValidationError& e) {
                EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
                EXPECT_NE(std::string(e.what()).find("must be positive"), std::string::npos) << e.what();
            }
        }
    }
    // A probe's buffers are whole MiB: a fraction is refused, not rounded away.
    for (const char* value : {"0.5", "1.5"}) {
        try {
            run_bench_cli(std::string("bench --synthetic tiny -n 2 --runs 1 --probe-mib ") + value);
            ADD_FAILURE() << "--probe-mib " << value << ": no error";
        } catch (const Error& e) {
            EXPECT_EQ(e.exit_code(), 2);
            EXPECT_EQ(std::string(e.what()), std::string("--probe-mib: ") + value +
                                                 " is not a whole number of MiB; give one, e.g. --probe-mib 256");
        }
    }
    try {
        run_bench_cli("bench --synthetic tiny -n 2 --runs 1 --probe-mib 1e300");
        ADD_FAILURE() << "--probe-mib 1e300: no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.exit_code(), 2);
        EXPECT_NE(std::string(e.what()).find("--probe-mib"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("allows in one buffer"), std::string::npos) << e.what();
    }
}

TEST(BenchCli, TheBinaryPrintsOneJsonObjectForACheckpointFile) {
    // Needs `bench` wired into run_cli (src/cli.cpp).
    TempDir dir;
    const auto model = write_model(dir, small_config());
    const CommandResult r = run_llama_cl("bench " + quote(model.string()) + " -n 2 --runs 1 --probe-mib 4 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const Json j = Json::parse(r.out);
    EXPECT_EQ(j.at("model").get<std::string>(), model.string());
    for (const char* field : kRequiredFields) EXPECT_TRUE(j.contains(field)) << field;
    const CommandResult bad = run_llama_cl("bench " + quote(model.string()) + " -n 0");
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_TRUE(bad.out.empty());
    EXPECT_NE(bad.err.find("-n"), std::string::npos) << bad.err;
}

// --prompt: a prefill of that many positions timed per run, its flops against the measured FMA throughput,
// and with --profile its own table of the prefill schedule's commands per prompt position.
TEST(BenchPrompt, PrefillRateFlopsAndProfile) {
    const Config c = small_config();
    const Checkpoint ck = in_memory(c);
    Device device = Device::open("", "", /*profiling=*/true);
    BenchOptions o = quick_options(3);
    o.prompt = 20;
    o.profile = true;
    const BenchResult r = run_benchmark(device, ck, "small", o);
    ASSERT_EQ(r.run_prompt_tok_s.size(), static_cast<std::size_t>(o.runs));
    EXPECT_GT(r.prompt_tok_s, 0);
    EXPECT_GT(r.device_fma_gflops, 0);
    EXPECT_DOUBLE_EQ(r.prompt_gflops, prefill_flops(c, 20) * r.prompt_tok_s / 20 / 1e9);
    EXPECT_DOUBLE_EQ(r.prompt_fma_pct, r.prompt_gflops / r.device_fma_gflops * 100);
    // Every layer's four products, once per batch (the whole prompt is one here); one classifier.
    const auto count = [&](const std::string& name) {
        for (const CommandProfile& p : r.prompt_profile)
            if (p.name == name) return p.count_per_token * o.prompt;
        return 0.0;
    };
    for (const char* gemm : {"gemm_qkv_rope", "gemm(wo)", "gemm_gate_up", "gemm(w2)"})
        EXPECT_NEAR(count(gemm), c.n_layers, 1e-9) << gemm;
    // Attention by rows, or in tiles on GPU shapes: one of the two per layer.
    EXPECT_NEAR(count("attention_rows") + count("attention_tiles"), c.n_layers, 1e-9);
    EXPECT_NEAR(count("write_embeddings"), 1, 1e-9);  // the batch's rows in one upload
    EXPECT_NEAR(count("classifier"), 1, 1e-9);
    const std::string text = format_bench_text(r);
    EXPECT_NE(text.find("prefill:     "), std::string::npos) << text;
    EXPECT_NE(text.find("of the FMA throughput"), std::string::npos) << text;
    EXPECT_NE(text.find("prefilled prompt positions"), std::string::npos) << text;
    // The rows the prefill's commands logged split the prompt's bytes and flops (the transfers aside),
    // and the GEMMs' rate is their flops over their event time.
    double kernel_bytes = 0, flops = 0, gemm_ms = 0, gemm_flops = 0;
    for (const CommandProfile& p : r.prompt_profile) {
        if (p.name != "write_embeddings" && p.name != "read_logits") kernel_bytes += p.bytes_per_token;
        flops += p.flops_per_token;
        if (is_gemm_command(p.name)) gemm_ms += p.ms_per_token, gemm_flops += p.flops_per_token;
    }
    const double bytes_want = prefill_bytes(c, o.prompt, r.plan.prefill_batch), flops_want = prefill_flops(c, o.prompt);
    EXPECT_NEAR(kernel_bytes * o.prompt, bytes_want, 1e-9 * bytes_want);
    EXPECT_NEAR(flops * o.prompt, flops_want, 1e-9 * flops_want);
    ASSERT_GT(gemm_ms, 0);
    EXPECT_DOUBLE_EQ(r.prompt_gemm_gflops, gemm_flops / (gemm_ms * 1e-3) / 1e9);
    EXPECT_DOUBLE_EQ(r.prompt_gemm_fma_pct, r.prompt_gemm_gflops / r.device_fma_gflops * 100);
    EXPECT_NE(text.find("the GEMMs (gemm*) together: "), std::string::npos) << text;
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(format_bench_json(r));
    EXPECT_EQ(j.at("prompt"), 20);
    EXPECT_EQ(j.at("prompt_tok_s"), r.prompt_tok_s);
    EXPECT_EQ(j.at("prompt_profile").size(), r.prompt_profile.size());
    EXPECT_EQ(j.at("prompt_gemm_fma_pct"), r.prompt_gemm_fma_pct);
    // On tensor cores their probe is the prompt's roof too; any GPU that has them does more with them than
    // with its SIMT cores' multiply-adds.
    if (r.prompt_tensor_cores) {
        EXPECT_GT(r.device_mma_gops, r.device_fma_gflops);
        EXPECT_DOUBLE_EQ(r.prompt_mma_pct, r.prompt_gflops * tensor_core_products(c.weight_format.type, r.prompt_precision) /
                                               r.device_mma_gops * 100);
        EXPECT_EQ(j.at("device_mma_gops"), r.device_mma_gops);
        EXPECT_NE(text.find("tensor cores: "), std::string::npos) << text;
    } else {
        EXPECT_EQ(r.device_mma_gops, 0);
        EXPECT_TRUE(j.at("device_mma_gops").is_null());
        EXPECT_TRUE(j.at("prompt_mma_pct").is_null());
        EXPECT_EQ(text.find("tensor cores: "), std::string::npos) << text;
    }
    // More positions than the context: a usage error.
    o.prompt = c.seq_len + 1;
    EXPECT_THROW(run_benchmark(device, ck, "small", o), Error);
}
