#pragma once
// The work-group shape the kernels are compiled for, and the device quirks that choose it: a module of its
// own so that what only names a shape (DeviceOptions) does not pull in the kernels.
#include <optional>
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
    // The gpu family with every float sum in run.c's order (ORDERED_SUMS in kernels/shape.cl): quantized
    // weights only, whose rows' lanes keep their groups' terms for one work-item to add in order.
    bool ordered = false;
    ShapeFamily family() const {
        return row_threads > 1 ? ShapeFamily::gpu : vector_width == 1 ? ShapeFamily::exact : ShapeFamily::cpu;
    }
    bool gpu_family() const { return family() == ShapeFamily::gpu; }
    // Whether the kernels compute the reference's bits: the exact family, or an ordered gpu shape.
    bool exact() const { return family() == ShapeFamily::exact || ordered; }
    std::string describe() const;
    bool operator==(const LaunchShape&) const = default;
};

// CPUs (PoCL): work-groups of one work-item per row, float16 multiply-adds along the row for the SIMD
// units, and no local-memory reductions (slow there). GPUs: work-groups of 256 with 16 work-items per
// row reading consecutive floats, the input staged in local memory and a tree reduction. "exact" is
// bit-identical to the reference where the device has doubles (kernels/expf.cl): on CPUs the CPU shape
// running run.c's sequential loops, on GPUs the gpu shape ordered (parse_launch_shape). CPUs take it for
// quantized weights (`weights`): their integer dot products are as fast in run.c's order
// (kernels/dot_quantized.cl), and a last-bit difference in an activation can change how runq.c's
// quantization rounds it, and with it the text.
LaunchShape choose_launch_shape(const DeviceInfo& device, const WeightFormat& weights = {});
// Parses "cpu", "gpu", "exact" (the shapes above, for any device), "ROWxLOCAL", e.g. "32x256", or
// "exact:ROWxLOCAL", that shape with run.c's order of sums (ordered, where ROW > 1). On GPUs "exact" is
// the gpu shape ordered.
LaunchShape parse_launch_shape(const std::string& text, const DeviceInfo& device);
// The shape a matrix of `weights` runs in: `shape`, except that an ordered shape runs float weights in
// the exact family's work-groups of 8 (their terms are the products themselves: ordering them through
// local memory would cost more than one work-item's loop).
LaunchShape shape_for(const LaunchShape& shape, const WeightFormat& weights);
// The shape a run's matrices of `weights` take on `device`: `asked` (--work-shape) as those weights run it
// (shape_for), else choose_launch_shape's.
LaunchShape launch_shape_for(const std::optional<LaunchShape>& asked, const DeviceInfo& device,
                             const WeightFormat& weights);

}  // namespace llamacl
