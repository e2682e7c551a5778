#pragma once
// The compiled kernels and the work-group shape they were compiled for. Device quirks that decide the
// shape live here and nowhere else.
#include <cstdint>
#include <string>

#include "llamacl/device.hpp"

namespace llamacl {

// How rows of a matrix-vector product are spread over work-items (see kernels/common.cl).
struct LaunchShape {
    int row_threads = 1;   // work-items cooperating on one output row (power of two)
    int local_size = 8;    // work-group size (power of two, multiple of row_threads)
    int vector_width = 1;  // with row_threads 1: elements per step (1: run.c's exact loop order)
    std::string describe() const;
};

// CPUs (PoCL): work-groups of one work-item per row, float16 multiply-adds along the row for the SIMD
// units, and no local-memory reductions (slow there). GPUs: work-groups of 256 with 16 work-items per
// row, float4 loads, the input staged in local memory and a tree reduction. "exact" is the CPU shape
// running run.c's sequential loops: bit-identical to the reference wherever OpenCL's exp() agrees with
// the C library's.
LaunchShape choose_launch_shape(const DeviceInfo& device);
// Parses "cpu", "gpu", "exact" (the shapes above, for any device) or "ROWxLOCAL", e.g. "32x256".
LaunchShape parse_launch_shape(const std::string& text, const DeviceInfo& device);

class KernelSet {
public:
    KernelSet(const Device& device, const LaunchShape& shape);

    const LaunchShape& shape() const { return shape_; }

    struct Range {
        cl::NDRange global, local;
    };
    // Work-items for a kernel computing `rows` output rows (or row pairs).
    Range rows(int rows) const;
    // Work-items for attention over n_heads heads.
    Range heads(int n_heads) const;
    // The two trailing arguments of the matrix-vector kernels: local memory for an input vector of n
    // floats, and n itself when the work-group should stage the input there (GPU shapes, when it fits in
    // local memory next to the reduction scratch), else 0.
    int staged_count(int n) const;
    cl::LocalSpaceArg staged_space(int n) const;

    cl::Kernel attn_qkv_rope, attention, matvec_residual, ffn_gate_up, classifier;

private:
    LaunchShape shape_;
    std::uint64_t local_mem_bytes_;
};

}  // namespace llamacl
