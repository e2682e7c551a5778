#pragma once
// The device's memory ceilings for bench's roofline: copy bandwidth on the device (kernels/copy.cl) and
// pinned host-to-device bandwidth (what streaming weight uploads use). Each probe times itself by OpenCL
// event timestamps on a profiling queue of its own, whatever the device's main queue is.
#include <cstdint>
#include <string>

#include "llamacl/device.hpp"
#include "llamacl/kernel_args.hpp"

namespace llamacl {

inline constexpr std::uint64_t kMiB = 1024 * 1024;

// Device copy bandwidth in GB/s (1e9 bytes/s): the best of `reps` copy_f32 kernels over `bytes` (read +
// write counted, so 2 x bytes moved).
double measure_copy_gbs(const Device& device, std::uint64_t bytes, int reps);
// The device's fp32 multiply-add throughput in GFLOP/s (a multiply-add counted as two flops): the best of
// `reps` launches of fma_f32 (kernels/copy.cl) filling every compute unit.
double measure_fma_gflops(const Device& device, int reps);
// The instruction prefill's GEMMs issue on tensor cores (kernels/tensor_cores.cl): TF32 products for float
// weights, int8 ones for Q8_0.
enum class MmaOperands { tf32, int8 };
// The tensor cores' throughput in giga-operations a second (a multiply-add counted as two): the best of
// `reps` launches of copy.cl's mma_tf32 or mma_s8 filling every compute unit. Only where prefill takes
// the tensor cores (KernelSet::tensor_cores): the kernels are NVIDIA's inline PTX.
double measure_mma_gops(const Device& device, MmaOperands operands, int reps);
// The probe's kernel for `operands`: mma_tf32 or mma_s8.
const KernelSignature& mma_probe_signature(MmaOperands operands);
// copy.cl's tensor-core probes, after the instructions they issue (GEMM_MMA: kernels/tensor_cores.cl), built
// with `options` added.
cl::Program mma_probe_program(const Device& device, const std::string& options = "");
// Host-to-device bandwidth in GB/s from pinned memory, best of `reps`.
double measure_h2d_gbs(const Device& device, std::uint64_t bytes, int reps);
// The probes' buffer size without --probe-mib: kCacheMultiple x the last-level cache, at least
// kMinProbeBytes (1 GiB when the device does not report its cache), and at most min(1 GiB, the largest
// allocation, global memory / 4).
inline constexpr std::uint64_t kCacheMultiple = 8;
inline constexpr std::uint64_t kMinProbeBytes = 64 * kMiB;
std::uint64_t default_probe_bytes(const DeviceInfo& info);
// The size the probes run at for `requested` bytes (0: the default), checked before anything is allocated:
// on a CPU device the two buffers may take half of the memory this process can still map; the default
// halves to fit (never below twice the cache), else an Error says what the probe needs.
std::uint64_t probe_bytes_for(const DeviceInfo& info, std::uint64_t requested);
// The size a probe of `bytes` runs at: whole MiB, at least one, so the copy's global size (in float4s) is
// a multiple of every work-group size a driver picks.
std::uint64_t probe_size(std::uint64_t bytes);

// How long a command ran (end - start), in seconds; its queue must have been opened with profiling.
double event_seconds(const cl::Event& event);

}  // namespace llamacl
