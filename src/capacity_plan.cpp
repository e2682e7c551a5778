#include "llamacl/capacity_plan.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "llamacl/device.hpp"
#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/kernel_set.hpp"
#include "llamacl/working_buffers.hpp"

namespace llamacl {

namespace {

std::string mib(std::uint64_t bytes) {
    if (bytes < 1024 * 1024 / 10) return std::to_string(bytes) + " bytes";  // (not "0.0 MiB")
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
    return buf;
}

}  // namespace

// The KV cache as reached, and as the whole context would need it when that is more.
std::string CapacityPlan::kv_cache() const {
    if (positions >= seq_len) return "KV cache " + mib(kv_cache_bytes);
    return "KV cache " + mib(kv_cache_bytes) + " (" + std::to_string(positions) + " positions; the whole context of " +
           std::to_string(seq_len) + " would need " + mib(context_kv_cache_bytes) + ")";
}

std::string CapacityPlan::describe() const {
    return "capacity: " + kv_cache() + " + constants " + mib(constant_bytes) + " + working " +
           mib(working_bytes) + " + " + std::to_string(layers_per_offload) + " x layer " + mib(layer_bytes) + " = " +
           mib(total_bytes()) + " of " + mib(usable_bytes) + " usable; " +
           (resident() ? "all " + std::to_string(n_layers) + " layers resident"
                       : std::to_string(layers_per_offload) + " layers per offload, " + std::to_string(chunks()) +
                             " chunks per token");
}

namespace {

// The largest batch, halving from `most`, whose working bytes fit beside the plan's K layers.
template <typename WorkingBytes>
CapacityPlan with_prefill_batch(CapacityPlan p, int most, const WorkingBytes& working_bytes) {
    for (int b = most; b > 1; b /= 2) {
        const std::uint64_t working = working_bytes(b);
        if (p.persistent_bytes() + working + p.layer_bytes * p.layers_per_offload <= p.usable_bytes) {
            p.prefill_batch = b;
            p.working_bytes = working;
            break;
        }
    }
    return p;
}

}  // namespace

CapacityPlan plan_capacity(const Config& model, const DeviceInfo& device, Finalize finalize, int requested_k,
                           std::uint64_t memory_limit, int max_prefill_batch, int positions) {
    const Config c = within_positions(model, positions);
    // Every layer has buffers of its own, and a driver spends host memory on each beyond its bytes (PoCL
    // about 8 KiB): a header's layer count, unbounded by a small file's size, must not multiply that.
    if (c.n_layers > kMaxDeviceLayers)
        throw Error(device.name + ": the model has " + std::to_string(c.n_layers) +
                    " layers; the OpenCL runtime keeps buffers for each and takes at most " +
                    std::to_string(kMaxDeviceLayers) +
                    " (no released model has more than a few hundred): " + cpu_reference_remedy());
    const ModelSize size(c);
    const std::uint64_t f = sizeof(float);
    CapacityPlan p;
    p.n_layers = c.n_layers;
    p.positions = c.seq_len;
    p.seq_len = model.seq_len;
    // Drivers keep some memory for themselves and fragment the rest; plan within 90 %.
    // `bound`: what set the total where the device's own memory did not, for the refusals below.
    std::uint64_t total = device.global_mem_bytes;
    std::string bound;
    if (memory_limit != 0 && memory_limit < total) {
        total = memory_limit;
        bound = " (as --max-device-memory caps it)";
    }
    // A CPU device's buffers are this process's memory, which PoCL reports as most of the machine's and
    // backs only at a buffer's first use, where a shortfall aborts the process: plan within what the
    // process can still map and the machine has free.
    if (const std::uint64_t host = device.is_cpu ? allocatable_host_bytes() : total; host < total) {
        total = host;
        bound = " (a CPU device's memory is this process's: free memory and ulimit -v bound it)";
    }
    p.usable_bytes = total / 10 * 9;
    p.kv_cache_bytes = size.kv_cache_bytes;
    p.context_kv_cache_bytes = ModelSize(model).kv_cache_bytes;
    p.constant_bytes = static_cast<std::uint64_t>(c.seq_len) * c.head_size() * f;  // RoPE cos/sin table
    if (finalize == Finalize::device) p.constant_bytes += size.embedding_bytes() + c.dim * f;
    // WorkingBuffers as the kernels this device may build size them: attention split into the most
    // chunks any device uses, its scores (and prefill's) counted in memory though kernels built with device
    // fences (and attention_tiles) keep them in local memory (the plan precedes the build); then the token kernel's chunk length per
    // position (int, seq_len), counted whether or not it runs.
    const auto working_bytes = [&](int prefill_batch) {
        const WorkingBuffers::Sizes work(c, max_attention_chunks(c),
                                         kMinGroupsPerComputeUnit * static_cast<int>(device.compute_units), true,
                                         true, prefill_batch);
        return work.total() + static_cast<std::uint64_t>(c.seq_len) * sizeof(cl_int);
    };
    p.working_bytes = working_bytes(1);
    p.layer_bytes = size.layer_bytes();

    const std::uint64_t largest_tensor = c.weight_format.bytes(std::max<std::uint64_t>(
        static_cast<std::uint64_t>(c.hidden_dim) * c.dim, static_cast<std::uint64_t>(c.dim) * c.dim));
    if (largest_tensor > device.max_alloc_bytes)
        throw Error(device.name + ": a single weight matrix needs " + mib(largest_tensor) +
                    " but the device's largest allocation is " + mib(device.max_alloc_bytes) +
                    "; this model cannot run on this device (" + cpu_reference_remedy() + ")");

    const std::uint64_t fixed = p.persistent_bytes() + p.working_bytes;
    const std::uint64_t room = p.usable_bytes > fixed ? p.usable_bytes - fixed : 0;
    const int fits = static_cast<int>(std::min<std::uint64_t>(room / p.layer_bytes, static_cast<std::uint64_t>(c.n_layers)));
    const auto numbers = [&] {
        return p.kv_cache() + " + constants " + mib(p.constant_bytes) + " + working " +
               mib(p.working_bytes) + " + layer " + mib(p.layer_bytes) + " x K must fit in " + mib(p.usable_bytes) +
               " usable on " + device.name + bound;
    };
    if (requested_k != 0) {
        if (requested_k < 1 || requested_k > c.n_layers)
            throw usage_error("--layers-per-offload: must be between 1 and n_layers (" + std::to_string(c.n_layers) +
                              "), got " + std::to_string(requested_k));
        if (requested_k > fits)
            throw Error("--layers-per-offload " + std::to_string(requested_k) + " does not fit: " + numbers() +
                        (fits >= 1 ? "; use --layers-per-offload " + std::to_string(fits) + " or less" : ""));
        p.layers_per_offload = requested_k;
        return with_prefill_batch(p, max_prefill_batch, working_bytes);
    }
    if (fits < 1)
        throw Error("model does not fit on the device even one layer at a time: " + numbers() +
                    (finalize == Finalize::device ? "; try --finalize=cpu to keep the classifier on the host, or"
                                                  : ";") +
                    " " + cpu_reference_remedy());
    p.layers_per_offload = fits;
    return with_prefill_batch(p, max_prefill_batch, working_bytes);
}

}  // namespace llamacl
