#pragma once
// Weights on the device. Layers live in K staging slots (K = layers_per_offload): when K == n_layers
// every layer is uploaded once and stays resident; otherwise the layers stream through the same slots
// chunk after chunk, token after token. The classifier, final norm and RoPE table are uploaded once.
//
// Who may overwrite a slot: only upload_chunk(), and only by enqueueing the copy on the one in-order
// queue, so the device finishes every kernel that reads the slot's previous layers before the copy
// starts. Streaming copies come from pinned host memory (drivers copy from pageable memory several times
// slower), in one of two ways:
//   - a pinned mirror: every chunk copied once from the mapped file into pinned memory of its own,
//     when the streamed layers take at most half of the memory still available (MemAvailable, within
//     the cgroup's limit) and the driver grants it. Nothing is ever rewritten,
//     so uploads need no host wait and no host copy per token.
//   - otherwise one pinned buffer of K layers, refilled chunk by chunk. The host may refill it only once
//     the previous copy out of it has completed: the one place it waits.
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "llamacl/capacity_plan.hpp"
#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"
#include "llamacl/layer_stack.hpp"
#include "llamacl/position_rows.hpp"
#include "llamacl/runtime_counters.hpp"

namespace llamacl {

struct LayerBuffers {
    cl::Buffer rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3;
};

// Rows [first_row, first_row + rows) of the classifier, in one device allocation.
struct ClassifierBlock {
    cl::Buffer weights;
    int first_row = 0;
    int rows = 0;
};

class WeightStaging {
public:
    // host_mirror: allow the pinned mirror when streaming (it is used if it fits, see above). stacked:
    // resident layers with each tensor of every layer in one allocation, for the token kernel.
    // The layers' matrices are written in `layout`, the classifier in `classifier_layout`: those of the
    // kernels that read them (KernelSet::weight_layout).
    WeightStaging(const Device& device, const Checkpoint& checkpoint, const DeviceWeightLayout& layout,
                  const DeviceWeightLayout& classifier_layout, const CapacityPlan& plan, Finalize finalize,
                  bool host_mirror, bool stacked, RuntimeCounters& counters);

    bool mirrored() const { return !mirror_.empty(); }

    // The device buffers holding `layer`, staging its chunk first when streaming. Layers are acquired in
    // order within a token; a chunk is uploaded when its first layer is asked for.
    const LayerBuffers& acquire(int layer);

    // Resident weights: the stack of every layer's `tensor` (e.g. &LayerBuffers::wq) the slots are parts
    // of; nullptr when streaming.
    const LayerStack* stack(cl::Buffer LayerBuffers::*tensor) const;

    const cl::Buffer& rope_table() const { return rope_.buffer(); }  // (seq_len, head_size/2) x (cos, sin)
    // The RoPE table's rows through position `last` on the device (PositionRows::reach).
    void reach_position(int last) { rope_.reach(last); }
    const cl::Buffer& rms_final() const { return rms_final_; }
    const std::vector<ClassifierBlock>& classifier() const { return classifier_; }  // empty with --finalize=cpu

private:
    void fill_mirror();  // leaves mirror_ empty when the pinned memory cannot be had
    void upload_chunk(int chunk);
    std::pair<int, int> chunk_layers(int chunk) const;  // [first, last) layers of a chunk
    template <typename F>
    void for_each_tensor(int chunk, std::byte* host, F f) const;

    const Device& device_;
    const Checkpoint& ck_;
    DeviceWeightLayout layout_;
    CapacityPlan plan_;
    RuntimeCounters& counters_;
    std::vector<LayerBuffers> slots_;
    std::vector<LayerStack> stacks_;  // resident: one per tensor of a layer, in staging order
    int staged_chunk_ = -1;
    std::vector<std::unique_ptr<PinnedBuffer>> mirror_;  // the pinned mirror: one buffer per chunk
    std::unique_ptr<PinnedBuffer> pinned_;  // without a mirror: the host side of streaming uploads (K layers)
    cl::Event pinned_in_use_;               // the last copy out of pinned_
    PositionRows rope_;
    cl::Buffer rms_final_;
    std::vector<ClassifierBlock> classifier_;
};

}  // namespace llamacl
