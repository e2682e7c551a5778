#pragma once
// Kernel arguments bound by name. Each kernel's signature (its arguments' names, in the order of its
// kernels/*.cl definition) is listed once here; the host binds values to names, and bind_args() puts
// each at its name's position. (Not called bind: with a std::vector of arguments, argument-dependent
// lookup would pick std::bind, which binds nothing.) A test (KernelSignatures) checks every list against CL_KERNEL_ARG_NAME of the built
// programs, so a reordered or renamed argument fails there instead of corrupting memory.
#include <initializer_list>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

#include "llamacl/device.hpp"

namespace llamacl {

struct KernelSignature {
    std::string_view kernel;                 // the kernel function's name
    std::span<const std::string_view> args;  // its arguments' names, in order
};

// Every kernel the host binds (the runtime, the kernel checks, bench's probes), with its file.
namespace signatures {
extern const KernelSignature attn_qkv_rope, ffn_gate_up, rmsnorm, classifier;  // norm_matvec.cl
extern const KernelSignature matvec_residual;                                  // matvec_residual.cl
extern const KernelSignature attention;                                        // attention.cl
extern const KernelSignature argmax, argmax_embed;                             // greedy.cl
extern const KernelSignature rmsnorm_rows, gemm, gemm_qkv_rope, gemm_gate_up, attention_rows;  // prefill.cl
extern const KernelSignature attention_tiles;                                  // attention_tiles.cl
extern const KernelSignature quantize_rows, rope_rows, swiglu;                 // prefill_quantized.cl
extern const KernelSignature forward_token;                                    // token.cl
extern const KernelSignature copy_f32, fma_f32, mma_tf32, mma_s8;              // copy.cl: bench's probes
}  // namespace signatures
// All of them.
std::span<const KernelSignature* const> kernel_signatures();

// One argument's value, for the argument of that name.
struct KernelArg {
    KernelArg(std::string_view arg, const cl::Buffer& buffer) : name(arg), value(&buffer) {}
    KernelArg(std::string_view arg, cl::LocalSpaceArg local) : name(arg), value(local) {}
    KernelArg(std::string_view arg, cl_int v) : name(arg), value(v) {}
    KernelArg(std::string_view arg, cl_uint v) : name(arg), value(v) {}
    KernelArg(std::string_view arg, cl_float v) : name(arg), value(v) {}

    std::string_view name;
    std::variant<const cl::Buffer*, cl::LocalSpaceArg, cl_int, cl_uint, cl_float> value;
};

// Sets each of `args` at its name's position in `signature`; throws std::logic_error for a name the
// signature does not have. (Arguments left unbound make the enqueue fail: OpenCL checks that.)
void bind_args(cl::Kernel& kernel, const KernelSignature& signature, std::span<const KernelArg> args);
inline void bind_args(cl::Kernel& kernel, const KernelSignature& signature, std::initializer_list<KernelArg> args) {
    bind_args(kernel, signature, std::span<const KernelArg>(args.begin(), args.size()));
}

}  // namespace llamacl
