#pragma once
// The token schedule: a whole token's forward pass as one launch of the token kernel (kernels/token.cl,
// token_cpu.cl; in greedy decoding several positions' in turn), for models that the per-op schedule's one
// command per step leaves bound by launch costs: small ones on GPUs, and any on PoCL, which pays several
// microseconds between commands. Its work-groups meet at grid-wide barriers between steps, which OpenCL
// does not promise to work: it needs every work-group running at once, and memory scopes the device may
// not advertise. So it is only offered where it builds, launches no more than two work-groups per compute
// unit on a GPU (two where the compiler's registers can be capped for them, else one where its registers
// allow no more) and one per CPU this process may run on on a CPU, and gives up (instead of hanging) when
// a barrier is not reached; the caller then tries one work-group per compute unit, and after that the
// per-op schedule for good. Its arithmetic is the per-op kernels' (the same unit functions), so both
// schedules agree to within the summation order of the row width each compiles for (on CPU shapes, bit
// for bit).
#include <memory>
#include <string>

#include "llamacl/capacity_plan.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/kv_cache.hpp"
#include "llamacl/position_rows.hpp"
#include "llamacl/weight_staging.hpp"
#include "llamacl/working_buffers.hpp"

namespace llamacl {

class TokenKernel {
public:
    // Whether a session can use the token kernel, from what is known before any allocation: a GPU with a
    // GPU shape, resident layers, the classifier on the device, and a layer's input, staged in the
    // weights' format, within local memory. If so, the session stacks its weights and KV cache
    // (layer_stack.hpp) and calls create(); if not, `why_not`.
    static bool wanted(const DeviceInfo& device, const LaunchShape& shape, const WeightFormat& weights,
                       const Config& config, const CapacityPlan& plan, Finalize finalize, std::string& why_not);
    // The token kernel for this model and these (stacked) buffers, or nullptr with the reason in
    // `why_not` when they cannot run it (a tensor split over allocations, a compiler without OpenCL C
    // 2.0's scopes, a work-group too large for the kernel's registers).
    static std::unique_ptr<TokenKernel> create(Device& device, KernelSet& kernels, const Config& config,
                                               const WeightStaging& weights, const KvCache& kv,
                                               const WorkingBuffers& work, std::string& why_not);

    // Enqueues the forward pass at `pos` (the token's embedding already in x): the logits land in the
    // working buffer, followed by the give-up mark.
    void enqueue(int pos, cl::Event* event);
    // Enqueues greedy decoding of positions [first, first + count) as one launch (the first one's token
    // embedding already in x): each position leaves the next token in the working buffer's sequence (the
    // sequence's own below position `chosen_from`, the prompt's; from there on the argmax of its logits)
    // and that token's embedding in x for the next. A launch that gives up marks the token after the
    // position it gave up at with -1; the positions before it are done, that one and those after it are
    // to be run again (work-groups that had passed the barrier where others gave up may still write part
    // of the next position before they give up too).
    void enqueue_greedy(int first, int count, int chosen_from, cl::Event* event);
    // Whether the mark says the kernel gave up at a barrier: `logits` is the read-back, vocab + 1 floats.
    static bool gave_up(const float* logits, int vocab) { return logits[vocab] != 0.0f; }
    // After giving up: the barrier, mark and counts cleared, and one work-group per compute unit from now
    // on, or false when it had no more than that.
    bool fewer_groups();
    // Work-groups of a launch: one or two per compute unit on a GPU, one per usable CPU on a CPU.
    int groups() const;
    // Attention's chunk lengths through position `last` on the device (PositionRows::reach).
    void reach_position(int last) { chunk_lens_.reach(last); }
    // Tests: the next `launches` launches give up, as if one of their work-groups had not run. Each of
    // their work-groups polls a barrier once before it gives up, so every one but the last to arrive does
    // (and then the last too, at the next barrier).
    void give_up_next(int launches);

private:
    TokenKernel(Device& device, cl::Kernel kernel, PositionRows chunk_lens, cl::Buffer sync, cl::Buffer xq,
                const WorkingBuffers& work, const Config& config, int groups, int local_size,
                int barriers_per_position, cl_uint spin_limit);
    void clear();  // zeroes the barrier's counts and flag, the give-up mark and attention's chunk counts
    void launch(int first, int count, bool greedy, int chosen_from, cl::Event* event);

    Device& device_;
    cl::Kernel kernel_;
    PositionRows chunk_lens_;  // attention's chunk length at each position (int, seq_len)
    cl::Buffer sync_;    // arrival count, give-up flag, greedy decoding's classifier count (token.cl)
    cl::Buffer xq_;      // inputs quantized once (token.cl's QUANTIZE_W2_ONCE, QUANTIZE_WO_INPUT; else a byte)
    cl::Buffer logits_;    // the working buffer's, for its give-up mark
    cl::Buffer arrivals_;  // the working buffer's attention chunk counts
    int vocab_, n_heads_;
    int barriers_per_position_;  // the kernel's grid barriers in one position's forward pass
    int groups_, local_size_;  // a launch's work-groups, and their size
    cl_uint spin_limit_;  // a barrier's polls before it gives up
    cl_uint sync_base_ = 0;  // the arrival count at the next launch's start
    int give_ups_ = 0;       // launches still to give up (give_up_next)
};

}  // namespace llamacl
