#pragma once
// The work-group shape the kernels are compiled for, and the device quirks that choose it: a module of its
// own so that what only names a shape (DeviceOptions) does not pull in the kernels.
#include <string>

#include "llamacl/device.hpp"
#include "llamacl/weight_format.hpp"

namespace llamacl {

// The families of launch shapes, each with its own kernel code (SHAPE_FAMILY in kernels/shape.cl, by the
// same rule): exact and cpu give each row one work-item (run.c's sequential loops; float16 steps), gpu
// shares a row among several.
enum class ShapeFamily { exact, cpu, gpu };

// How rows of a matrix-vector product are spread over work-items (see kernels/shape.cl).
struct LaunchShape {
    int row_threads = 1;   // work-items cooperating on one output row (power of two)
    int local_size = 8;    // work-group size (power of two, multiple of row_threads)
    int vector_width = 1;  // with row_threads 1: elements per step (1: run.c's exact loop order)
    ShapeFamily family() const {
        return row_threads > 1 ? ShapeFamily::gpu : vector_width == 1 ? ShapeFamily::exact : ShapeFamily::cpu;
    }
    bool gpu_family() const { return family() == ShapeFamily::gpu; }
    std::string describe() const;
    bool operator==(const LaunchShape&) const = default;
};

// CPUs (PoCL): work-groups of one work-item per row, float16 multiply-adds along the row for the SIMD
// units, and no local-memory reductions (slow there). GPUs: work-groups of 256 with 16 work-items per
// row reading consecutive floats, the input staged in local memory and a tree reduction. "exact" is the CPU shape
// running run.c's sequential loops: bit-identical to the reference where the device has doubles
// (kernels/expf.cl). CPUs take it for quantized weights (`weights`): their integer dot products are as fast
// in run.c's order (kernels/dot_quantized.cl), and a last-bit difference in an activation can change how runq.c's
// quantization rounds it, and with it the text.
LaunchShape choose_launch_shape(const DeviceInfo& device, const WeightFormat& weights = {});
// Parses "cpu", "gpu", "exact" (the shapes above, for any device) or "ROWxLOCAL", e.g. "32x256".
LaunchShape parse_launch_shape(const std::string& text, const DeviceInfo& device);

}  // namespace llamacl
