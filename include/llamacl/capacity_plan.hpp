#pragma once
// The capacity contract: persistent + working + K x layer <= usable device memory, where K is the number
// of layers staged at once (--layers-per-offload). K = n_layers means every layer stays resident.
#include <cstdint>
#include <string>

#include "llamacl/checkpoint.hpp"

namespace llamacl {

struct DeviceInfo;

// Where the final RMSNorm and classifier run: on the device (only logits come back) or on the host
// (the final hidden state comes back).
enum class Finalize { cpu, device };

struct CapacityPlan {
    std::uint64_t usable_bytes = 0;      // device memory we allow ourselves (a margin below the total)
    std::uint64_t kv_cache_bytes = 0;    // keys and values for every layer and position the run reaches
    std::uint64_t context_kv_cache_bytes = 0;  // the same for the model's whole context (seq_len)
    std::uint64_t constant_bytes = 0;    // RoPE table, and with --finalize=device the classifier and final norm
    std::uint64_t working_bytes = 0;     // activations and scratch, rewritten every layer
    std::uint64_t layer_bytes = 0;       // one staging slot: all tensors of one layer
    int n_layers = 0;
    int positions = 0;                   // the positions the run can reach (at most seq_len)
    int seq_len = 0;                     // the model's context
    int layers_per_offload = 0;          // K: layers resident at once
    int prefill_batch = 1;               // positions a prefill batch holds (its activations are working bytes)

    bool resident() const { return layers_per_offload == n_layers; }
    int chunks() const { return (n_layers + layers_per_offload - 1) / layers_per_offload; }
    std::uint64_t persistent_bytes() const { return kv_cache_bytes + constant_bytes; }
    std::uint64_t total_bytes() const { return persistent_bytes() + working_bytes + layer_bytes * layers_per_offload; }
    std::string kv_cache() const;  // "KV cache X MiB", with the whole context's figure when that is more
    // One line for --verbose: the contract's terms and the chosen K.
    std::string describe() const;
};

// The most layers the OpenCL runtime holds (plan_capacity refuses more).
constexpr int kMaxDeviceLayers = 4096;

// Chooses K (requested_k == 0: the largest that fits, else validates requested_k). `memory_limit`
// (0: none) caps the device memory considered, to rehearse small devices. Throws Error with the
// numbers when even K = 1 cannot fit, when one tensor exceeds the device's largest allocation, or past
// kMaxDeviceLayers.
// The prefill batch takes only memory the K layers leave: `max_prefill_batch` positions, halved until its
// activations fit beside them (at least one position). Per-position terms count the `positions` the run
// can reach (0: seq_len; see within_positions).
CapacityPlan plan_capacity(const Config& config, const DeviceInfo& device, Finalize finalize, int requested_k,
                           std::uint64_t memory_limit = 0, int max_prefill_batch = 1, int positions = 0);

}  // namespace llamacl
