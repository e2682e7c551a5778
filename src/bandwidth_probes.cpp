#include "llamacl/bandwidth_probes.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <string_view>

#include "llamacl/embedded_kernels.hpp"
#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/kernel_args.hpp"

namespace llamacl {

namespace {

std::string embedded_source(std::string_view file) {
    for (const EmbeddedKernel& k : embedded_kernels())
        if (k.file == file) return std::string(k.source);
    throw Error("kernels/" + std::string(file) + " is not embedded in this build");
}

cl::Program copy_program(const Device& device) {
    return device.build_program_from_source(embedded_source("copy.cl"), "");
}

cl::CommandQueue profiling_queue(const Device& device) {
    return cl::CommandQueue(device.context(), device.device(), CL_QUEUE_PROFILING_ENABLE);
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

}  // namespace

cl::Program mma_probe_program(const Device& device, const std::string& options) {
    return device.build_program_from_source(embedded_source("tensor_cores.cl") + embedded_source("copy.cl"),
                                            "-DGEMM_MMA -DMMA_PROBE " + options);
}

double event_seconds(const cl::Event& event) {
    const cl_ulong start = event.getProfilingInfo<CL_PROFILING_COMMAND_START>();
    const cl_ulong end = event.getProfilingInfo<CL_PROFILING_COMMAND_END>();
    return static_cast<double>(end - start) * 1e-9;
}

std::uint64_t probe_size(std::uint64_t bytes) { return std::max<std::uint64_t>(bytes / kMiB, 1) * kMiB; }

std::uint64_t default_probe_bytes(const DeviceInfo& info) {
    // Several times the last-level cache, so that the copy streams from memory (1 GiB where the device
    // does not say), while the probe's two buffers take at most half of the device memory.
    const std::uint64_t beyond_cache =
        info.global_cache_bytes ? std::max(kMinProbeBytes, kCacheMultiple * info.global_cache_bytes) : 1024 * kMiB;
    return probe_size(std::min({std::uint64_t{1024} * kMiB, beyond_cache, info.max_alloc_bytes, info.global_mem_bytes / 4}));
}

std::uint64_t probe_bytes_for(const DeviceInfo& info, std::uint64_t requested) {
    std::uint64_t bytes = probe_size(requested ? requested : default_probe_bytes(info));
    if (!info.is_cpu) return bytes;  // a GPU's buffers are its own memory, which the default already bounds
    // A CPU device's buffers are this process's memory: the two may take half of what it can still map.
    const std::uint64_t room = allocatable_host_bytes() / 2;
    // The default shrinks while it still exceeds the cache twice over; a size given stays as given.
    const std::uint64_t floor = requested ? bytes : std::max(kMiB, 2 * info.global_cache_bytes);
    while (2 * bytes > room && bytes / 2 >= floor) bytes = probe_size(bytes / 2);
    if (2 * bytes > room)
        throw Error(info.name + ": the copy bandwidth probe needs 2 x " + std::to_string(bytes / kMiB) +
                    " MiB but this process can map only " + std::to_string(room * 2 / kMiB) +
                    " MiB more (ulimit -v or free memory); raise the limit" +
                    (requested ? " or give a smaller --probe-mib" : ""));
    return bytes;
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
    bind_args(copy, signatures::copy_f32, {{"src", src}, {"dst", dst}});
    const cl::NDRange float4s(bytes / (4 * sizeof(float)));
    const double s = best_seconds(queue, reps, [&](cl::Event* event) {
        queue.enqueueNDRangeKernel(copy, cl::NullRange, float4s, cl::NullRange, nullptr, event);
    });
    return 2.0 * static_cast<double>(bytes) / s / 1e9;  // every byte is read once and written once
}

double measure_fma_gflops(const Device& device, int reps) {
    // Enough work-items for every compute unit many times over, each long enough that launching is noise.
    constexpr int kChains = 8, kWidth = 16, kSteps = 4096;  // FMA_CHAINS, float16, steps
    const std::size_t items = static_cast<std::size_t>(device.info().compute_units) * 1024;
    cl::CommandQueue queue = profiling_queue(device);
    cl::Buffer out = device.allocate(items * sizeof(float), "FMA throughput probe");
    cl::Kernel fma(copy_program(device), "fma_f32");
    bind_args(fma, signatures::fma_f32, {{"out", out}, {"b", 0.999f}, {"c", 0.001f}, {"steps", kSteps}});
    const double s = best_seconds(queue, reps, [&](cl::Event* event) {
        queue.enqueueNDRangeKernel(fma, cl::NullRange, cl::NDRange(items), cl::NullRange, nullptr, event);
    });
    return 2.0 * kChains * kWidth * kSteps * static_cast<double>(items) / s / 1e9;
}

double measure_mma_gops(const Device& device, MmaOperands operands, int reps) {
    // As the FMA probe: 32 warps for every compute unit, each long enough that launching is noise.
    constexpr int kChains = 8, kWarp = 32, kSteps = 4096;  // MMA_CHAINS, steps
    const bool int8 = operands == MmaOperands::int8;
    const double multiply_adds = int8 ? 16 * 8 * 32 : 16 * 8 * 8;  // an instruction's, a warp's
    const std::size_t items = static_cast<std::size_t>(device.info().compute_units) * 1024;
    cl::CommandQueue queue = profiling_queue(device);
    cl::Buffer out = device.allocate(items * sizeof(float), "tensor-core throughput probe");
    const KernelSignature& signature = mma_probe_signature(operands);
    cl::Kernel mma(mma_probe_program(device), std::string(signature.kernel).c_str());
    bind_args(mma, signature,
              {{"out", out},
               {"a", int8 ? 0x01010101u : 0x3f800000u},   // ones
               {"b", int8 ? 0x01010101u : 0x3a800000u},   // ones; 2^-10
               {"steps", kSteps}});
    const double s = best_seconds(queue, reps, [&](cl::Event* event) {
        queue.enqueueNDRangeKernel(mma, cl::NullRange, cl::NDRange(items), cl::NDRange(256), nullptr, event);
    });
    return 2.0 * multiply_adds * kChains * kSteps * static_cast<double>(items / kWarp) / s / 1e9;
}

const KernelSignature& mma_probe_signature(MmaOperands operands) {
    return operands == MmaOperands::int8 ? signatures::mma_s8 : signatures::mma_tf32;
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

}  // namespace llamacl
