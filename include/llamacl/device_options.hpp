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

// Whether prefill's GEMMs run on tensor cores (kernels/tensor_cores.cl): where the device has them, never
// (the portable path everywhere), or emulated (tests: the tensor-core kernels on any device, the
// instruction computed through local memory).
enum class TensorCores { where_present, never, emulated };

// The accuracy of prefill's GEMMs of float weights (f32, f16) on tensor cores: exact (3xTF32, or 2 for f16:
// about fp32's), or fast (one TF32 product, as llama.cpp's cuBLAS takes them). Integer formats, decode,
// and GEMMs without tensor cores (the portable and CPU kernels) are the same in both.
enum class PromptPrecision { exact, fast };
inline const char* prompt_precision_name(PromptPrecision p) { return p == PromptPrecision::fast ? "fast" : "exact"; }

struct DeviceOptions {
    int layers_per_offload = 0;          // 0: the largest K that fits the capacity contract
    Finalize finalize = Finalize::device;
    std::optional<LaunchShape> shape;    // default: choose_launch_shape() for the device and weights
    std::uint64_t memory_limit = 0;      // 0: the device's own global memory
    bool host_mirror = true;             // streaming: allow a pinned host mirror (see weight_staging.hpp)
    Schedule schedule = Schedule::automatic;
    int positions = 0;                   // the positions the run can reach; 0: the model's seq_len
    TensorCores tensor_cores = TensorCores::where_present;  // prefill's GEMMs on tensor cores
    PromptPrecision prompt_precision = PromptPrecision::exact;
};

}  // namespace llamacl
