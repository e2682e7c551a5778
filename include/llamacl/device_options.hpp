#pragma once
// The choices that shape the device runtime for a session, as the command line gives them
// (runtime_args.hpp) and DeviceForward takes them.
#include <cstdint>
#include <optional>

#include "llamacl/capacity_plan.hpp"  // Finalize
#include "llamacl/launch_shape.hpp"

namespace llamacl {

// How a token's work is put on the queue: the token kernel where the device and the model allow it
// (automatic), always one command per step (per_op), or the token kernel or an error (token).
enum class Schedule { automatic, per_op, token };

struct DeviceOptions {
    int layers_per_offload = 0;          // 0: the largest K that fits the capacity contract
    Finalize finalize = Finalize::device;
    std::optional<LaunchShape> shape;    // default: choose_launch_shape() for the device and weights
    std::uint64_t memory_limit = 0;      // 0: the device's own global memory
    bool host_mirror = true;             // streaming: allow a pinned host mirror (see weight_staging.hpp)
    Schedule schedule = Schedule::automatic;
    int positions = 0;                   // the positions the run can reach; 0: the model's seq_len
    bool tensor_cores = true;            // prefill's GEMMs on tensor cores where the device has them
};

}  // namespace llamacl
