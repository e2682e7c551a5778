#pragma once
// The device executor: runs whole transformer layers on the OpenCL device. Per token it enqueues, on the
// one in-order queue and with no host wait in between, the embedding row upload and either the token
// kernel (the whole forward pass in one launch, token_kernel.hpp: GPUs, resident weights) or five fused
// kernels per layer (attn_qkv_rope, attention, matvec_residual for wo, ffn_gate_up, matvec_residual for
// w2; a long context's attention chunks are combined by the last of each head's), then the classifier
// (after the final RMSNorm on its own, for CPU shapes). The host waits only where it has a reason to:
//   - before refilling pinned staging memory the device may still be copying from (streaming without a
//     pinned mirror only: WeightStaging::upload_chunk, once per chunk), and
//   - to read the result it needs: the logits (--finalize=device) or the final hidden state
//     (--finalize=cpu, where the CPU reference runs the final RMSNorm and classifier), or in greedy
//     decoding on the device only the next token.
//
// Greedy decoding on the device (GreedyDecoder): where the classifier is on the device and shared with
// the embedding table, the device takes each position's argmax itself and writes that token's embedding
// row into x (kernels/greedy.cl: two more commands per position, one where the next token is the
// prompt's; in the token kernel, the last work-group to finish the classifier),
// so no position waits for the host. The host enqueues positions in batches (kGreedyBatch: one token kernel
// launch runs them all) and reads their token ids (4 bytes each) once per batch; its own turn (reading,
// printing, enqueueing) overlaps the device's work on the next batch instead of leaving the device idle
// between tokens.
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "llamacl/capacity_plan.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/commands.hpp"
#include "llamacl/device.hpp"
#include "llamacl/device_options.hpp"
#include "llamacl/error.hpp"
#include "llamacl/forward.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/kv_cache.hpp"
#include "llamacl/runtime_counters.hpp"
#include "llamacl/token_kernel.hpp"
#include "llamacl/weight_staging.hpp"
#include "llamacl/working_buffers.hpp"

namespace llamacl {

// The checkpoint's config where the device's kernels of `shape` read its weights: a quantized format on
// the device reads a row 4 weights at a time, from an input its work-groups quantize into local memory
// (kernels/weights.cl, dot_quantized.cl); otherwise throws Error naming the file or device and the remedy.
const Config& device_weights(const Checkpoint& ck, const DeviceInfo& device, const LaunchShape& shape);

// How -v and bench name a schedule: "token (... N work-groups)" for token_groups N > 0, else
// "per-op (...: per_op_reason)".
std::string describe_schedule(int token_groups, const std::string& per_op_reason);

// One command of a token's schedule, recorded for `bench --profile`: which command, and its event, whose
// timestamps the queue fills in when it was opened with profiling.
struct LaunchRecord {
    Command command;
    cl::Event event;
    const char* name() const { return command_name(command); }  // "attn_qkv_rope", "matvec_residual(wo)", ...
};

// A boundary whose device result is deliberately corrupted: the self-test of --compare-cpu.
struct Fault {
    int layer = -1;  // -1 for final_norm and logits
    Op op = Op::logits;
};

class DeviceForward : public Forward, private GreedyDecoder {
public:
    // Greedy decoding enqueues positions in batches of kGreedyBatch (resident layers; streamed ones one
    // position at a time), each one launch of the token kernel (or its positions' per-op commands) and
    // one read of their tokens, and keeps kGreedyBatches batches enqueued: the one the host reads and the
    // next, which the device runs meanwhile: a launch per position would leave the device idle between
    // positions for the read and the next launch. A generation that stops early (at BOS) computes at most
    // 2 * kGreedyBatch - 1 positions for nothing.
    static constexpr int kGreedyBatch = 8, kGreedyBatches = 2;

    DeviceForward(Device& device, const Checkpoint& checkpoint, const DeviceOptions& options);

    std::span<float> forward(int token, int pos) override;
    // As forward(), also reading back every boundary for `observer` after the kernel that produces it.
    // The kernels and their order are the production schedule's; only the extra reads are added.
    std::span<float> forward(int token, int pos, const BoundaryObserver& observer);

    // The prompt in batches of up to prefill_batch() positions (the prefill schedule: kernels/prefill.cl),
    // each through every layer with matrix-matrix kernels (a streamed model's chunks uploaded once per
    // batch), then the classifier on the positions whose logits are asked for: the last, or with `each`
    // every one. An injected fault runs forward() position by position, whose boundaries it corrupts, and
    // so does a device whose work-groups cannot hold the GEMM's (KernelSet::prefill_possible).
    std::span<float> prefill(std::span<const int> tokens, int first, const LogitsObserver& each = {}) override;
    int prefill_batch() const { return work_.prefill_batch; }

    // Greedy decoding on the device where the model allows it (the classifier on the device, shared
    // with the embedding table, in one allocation), else nullptr.
    GreedyDecoder* greedy_decoder() override;

    void inject_fault(const Fault& fault) { fault_ = fault; }
    bool fault_injected() const { return fault_.has_value(); }
    // Reads back the keys (op k) or values (op v) of `layer` at positions [first, first + count).
    std::vector<float> cache_rows(int layer, Op op, int first, int count);

    // Appends every kernel, the embedding upload and the result read-back of the following tokens to
    // `log`, with their events; nullptr (the default) stops recording. Off, the schedule enqueues
    // exactly as without it: no events, no allocations. (Streaming weight uploads are WeightStaging's
    // and are not recorded.)
    void record_launches(std::vector<LaunchRecord>* log) { launch_log_ = log; }

    const RuntimeCounters& counters() const { return counters_; }
    const CapacityPlan& plan() const { return plan_; }
    bool host_mirror() const { return weights_.mirrored(); }
    const LaunchShape& shape() const { return kernels_.shape(); }
    // Whether prefill's GEMMs run on tensor cores (KernelSet::tensor_cores).
    bool tensor_cores() const { return kernels_.tensor_cores(); }
    // The precision they run at (KernelSet::prompt_precision: fast only where it takes effect).
    PromptPrecision prompt_precision() const { return kernels_.prompt_precision(); }
    // Whether tokens run as one launch of the token kernel, and if not, why not.
    bool token_schedule() const { return token_ != nullptr; }
    int token_groups() const { return token_ ? token_->groups() : 0; }  // the token kernel's launch, 0 without
    const std::string& per_op_reason() const { return per_op_reason_; }
    // Tests: the token kernel's next `launches` launches give up (TokenKernel::give_up_next).
    void token_kernel_give_up_next(int launches) {
        if (token_) token_->give_up_next(launches);
    }

private:
    // The public constructor's work, for the launch shape it chooses once.
    DeviceForward(Device& device, const Checkpoint& checkpoint, const DeviceOptions& options, const LaunchShape& shape);
    void start(int first, std::span<const int> forced, int end) override;
    int next(int pos) override;
    // Copies the forced tokens at positions from `from` on into the device's token sequence (without waiting).
    void upload_forced(int from);
    // Enqueues the next batch of greedy positions (from greedy_.enqueued) and the non-blocking read of the
    // tokens they leave.
    void enqueue_greedy_batch();
    // After the token kernel gave up: one work-group per compute unit, else the per-op schedule for good;
    // the caller runs the token again.
    void token_kernel_gave_up();

    // The token's embedding row, straight from the mapped file into the residual stream x.
    void write_embedding(int token);
    void run(int token, int pos, const BoundaryObserver& observer);
    // The tables kept per position (the RoPE table, the token kernel's chunk lengths) written through
    // `last` before the commands that reach it are enqueued.
    void reach_position(int last);
    // The layers and the classifier, one command per step (the per-op schedule): the logits land in the
    // working buffer, or with --finalize=cpu the final hidden state is left in x.
    void enqueue_per_op(int pos, const BoundaryObserver& observer);
    // The final RMSNorm and classifier of x (--finalize=device; nothing with --finalize=cpu).
    void enqueue_classifier(const BoundaryObserver& observer);
    // Waits for the position's result: the logits (and with `mark` the token kernel's give-up mark), or
    // with --finalize=cpu the final hidden state, which the host finishes.
    void read_result(bool mark, const BoundaryObserver& observer);
    std::span<float> result_logits();
    // Positions [pos, pos + tokens.size()) through every layer, their residual streams left in batch_x.
    void enqueue_prefill_batch(std::span<const int> tokens, int pos);
    // Launches gemm: out (from out_offset) = w (rows x n) times in's `positions` rows, added with `accumulate`.
    // Greedy decoding's two kernels after the classifier (per-op schedule): the next token is the argmax of
    // the logits when `choose`, else the one the device's token sequence already holds (the prompt's).
    void enqueue_next_token(int pos, bool choose);
    void launch(const KernelSet::Launch& launch, Command command);
    // Where the next command's event goes: a new record in the launch log, or nullptr when it is off.
    cl::Event* log_event(Command command);
    // Applies an injected fault to, and reports, `count` floats of `buffer` from `offset`.
    void boundary(int layer, Op op, const cl::Buffer& buffer, std::size_t offset, std::size_t count,
                  const BoundaryObserver& observer);
    void boundary_host(int layer, Op op, std::span<float> values, const BoundaryObserver& observer);
    Error device_error(const cl::Error& e) const;

    Device& device_;
    const Checkpoint& ck_;
    Config c_;
    Finalize finalize_;
    RuntimeCounters counters_;
    CapacityPlan plan_;
    KernelSet kernels_;
    // The classifier's, where its format is not the layers' (Config::table_format); else null.
    std::unique_ptr<KernelSet> own_classifier_kernels_;
    KernelSet& classifier_kernels() { return own_classifier_kernels_ ? *own_classifier_kernels_ : kernels_; }
    std::string per_op_reason_;  // why token_ is null
    bool stacked_;               // weights and KV cache laid out for the token kernel
    WorkingBuffers work_;
    KvCache kv_;
    WeightStaging weights_;
    std::unique_ptr<TokenKernel> token_;          // null: the per-op schedule
    std::unique_ptr<PinnedBuffer> logits_host_;  // --finalize=device: where the logits (and mark) land
    // Prefill: a batch's embedding rows gathered for one upload (a command per row leaves the device idle
    // between them: each costs the host more than the device), and that upload, which may still be reading
    // them when the next batch gathers.
    std::unique_ptr<PinnedBuffer> embeddings_host_;
    cl::Event embeddings_written_;
    std::vector<float> hidden_, normed_, logits_;  // --finalize=cpu: host side of the final step
    std::vector<float> scratch_;                   // boundary read-backs
    std::optional<Fault> fault_;
    std::vector<LaunchRecord>* launch_log_ = nullptr;

    // Greedy decoding on the device: the positions [first, end) being decoded, the next one to enqueue,
    // the token at the position the host reads next (to run it again should the token kernel give up),
    // and the host side of the device's token sequence for the forced tokens' upload.
    struct Greedy {
        int first = 0, end = 0, enqueued = 0, current = 0;
        int forced = 0;                     // tokens given from `first`
        std::vector<cl_int> forced_tokens;  // from `first`; written only in start(), after forced_written
        cl::Event forced_written;
        // The tokens read back, at their positions (seq_len + 1). Declared after `forced_tokens`, so destroyed
        // before it: its destructor finishes the queue, which may still be copying from `forced_tokens`.
        std::unique_ptr<PinnedBuffer> read_back;
        // The batches enqueued and not yet read past, oldest first: positions [first, first + count), the
        // read of their tokens, and whether the host has waited for it.
        struct Batch {
            int first, count;
            cl::Event read;
            bool read_done;
        };
        std::deque<Batch> batches;
    };
    Greedy greedy_;
};

}  // namespace llamacl
