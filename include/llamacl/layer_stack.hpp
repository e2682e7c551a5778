#pragma once
// One tensor of every layer. Stacked, it is one device allocation: the token kernel takes the whole
// allocation and the stride and walks the layers itself, the per-op kernels take one layer's part as a
// sub-buffer. Otherwise (or where the whole would exceed the device's largest allocation) each layer
// gets an allocation of its own and there is no whole; the per-op kernels run the same on either.
#include <cstddef>
#include <string>
#include <vector>

#include "llamacl/device.hpp"

namespace llamacl {

class LayerStack {
public:
    // `layers` parts of `elements` elements of `element_bytes` each (floats, halves, or the bytes of a
    // Q8_0 tensor's values and scales), in one allocation when `stacked`. There each part starts at the
    // device's base-address alignment (a sub-buffer must), so the stride is `elements` rounded up to it;
    // the capacity plan does not count that padding (less than the alignment per part).
    static LayerStack allocate(const Device& device, std::size_t elements, int layers, bool stacked,
                               const std::string& what, cl_mem_flags flags = CL_MEM_READ_WRITE,
                               std::size_t element_bytes = sizeof(float));

    // Each layer's part, `elements` elements of `element_bytes` at parts[l] in host memory that outlives the
    // stack, as a buffer over it (Device::wrap): on a CPU device the kernels read the layers where they
    // lie. When `stacked` and the parts follow each other (as a checkpoint's layers of one tensor do), the
    // whole is a buffer over all of them too, within the device's largest allocation.
    static LayerStack wrap(const Device& device, const std::vector<const std::byte*>& parts, std::size_t elements,
                           std::size_t element_bytes, bool stacked, const std::string& what);
    // Whether the parts of `bytes` bytes each follow one another in memory.
    static bool contiguous(const std::vector<const std::byte*>& parts, std::size_t bytes);

    const cl::Buffer& whole() const { return whole_; }  // null when the layers are separate allocations
    std::size_t stride() const { return stride_; }      // elements from one layer's part of whole() to the next
    // Layer l's part: its own allocation, or a sub-buffer of the whole made on first use. Sub-buffers are
    // not free: NVIDIA's driver spends host time on every sub-buffer of a buffer each time a kernel
    // taking that buffer is enqueued, so a run that only launches the token kernel never makes them.
    const cl::Buffer& layer(int l) const;
    // Copies one layer's elements from host memory (without waiting).
    void write(const cl::CommandQueue& queue, int l, const void* data) const;

private:
    cl::Buffer whole_;
    mutable std::vector<cl::Buffer> layers_;  // one per layer; sub-buffers made on first use
    std::size_t elements_ = 0, stride_ = 0, element_bytes_ = sizeof(float);
    cl_mem_flags flags_ = CL_MEM_READ_WRITE;
};

}  // namespace llamacl
