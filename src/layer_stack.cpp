#include "llamacl/layer_stack.hpp"

namespace llamacl {

LayerStack LayerStack::allocate(const Device& device, std::size_t elements, int layers, bool stacked,
                                const std::string& what, cl_mem_flags flags, std::size_t element_bytes) {
    LayerStack stack;
    const std::size_t align = device.info().base_align_bytes / element_bytes;
    stack.elements_ = elements;
    stack.element_bytes_ = element_bytes;
    stack.stride_ = (elements + align - 1) / align * align;
    stack.flags_ = flags;
    stack.layers_.resize(static_cast<std::size_t>(layers));
    const std::size_t whole_bytes = stack.stride_ * layers * element_bytes;
    if (stacked && whole_bytes <= device.info().max_alloc_bytes) {
        stack.whole_ = device.allocate(whole_bytes, what + " of all layers", flags);
    } else {
        for (int l = 0; l < layers; ++l)
            stack.layers_[l] = device.allocate(elements * element_bytes, what + " of layer " + std::to_string(l), flags);
    }
    return stack;
}

LayerStack LayerStack::wrap(const Device& device, const std::vector<const std::byte*>& parts, std::size_t elements,
                            std::size_t element_bytes, bool stacked, const std::string& what) {
    LayerStack stack;
    const std::size_t bytes = elements * element_bytes;
    stack.elements_ = stack.stride_ = elements;
    stack.element_bytes_ = element_bytes;
    stack.flags_ = CL_MEM_READ_ONLY;
    for (std::size_t l = 0; l < parts.size(); ++l)
        stack.layers_.push_back(device.wrap(parts[l], bytes, what + " of layer " + std::to_string(l)));
    // The layers' own buffers serve the per-op kernels, so the whole needs no sub-buffers (nor their
    // aligned offsets).
    if (stacked && contiguous(parts, bytes) && bytes * parts.size() <= device.info().max_alloc_bytes)
        stack.whole_ = device.wrap(parts.front(), bytes * parts.size(), what + " of all layers");
    return stack;
}

bool LayerStack::contiguous(const std::vector<const std::byte*>& parts, std::size_t bytes) {
    for (std::size_t l = 1; l < parts.size(); ++l)
        if (parts[l] != parts[0] + l * bytes) return false;
    return !parts.empty();
}

const cl::Buffer& LayerStack::layer(int l) const {
    cl::Buffer& part = layers_[static_cast<std::size_t>(l)];
    if (part() == nullptr) {
        const cl_buffer_region region{l * stride_ * element_bytes_, elements_ * element_bytes_};
        part = cl::Buffer(whole_).createSubBuffer(flags_, CL_BUFFER_CREATE_TYPE_REGION, &region);
    }
    return part;
}

void LayerStack::write(const cl::CommandQueue& queue, int l, const void* data) const {
    const std::size_t bytes = elements_ * element_bytes_;
    if (whole_() != nullptr)
        queue.enqueueWriteBuffer(whole_, CL_FALSE, l * stride_ * element_bytes_, bytes, data);
    else
        queue.enqueueWriteBuffer(layers_[static_cast<std::size_t>(l)], CL_FALSE, 0, bytes, data);
}

}  // namespace llamacl
