#pragma once
// LLAMACL_BUILD_OPTIONS: OpenCL compiler options a user adds to every kernel build, after llama-cl's own
// (bring-up: -cl-opt-disable; experiments: a kernel's tunables). The kernels' macros are the host's, set
// from the device and the model, but for the tunables listed here: a -D or -U of any other is refused.
#include <string>
#include <string_view>

namespace llamacl {

struct KernelTunable {
    const char* name;
    const char* values;  // what it may be and what it sets, as the kernel checks it (#error)
};
inline constexpr KernelTunable kKernelTunables[] = {
    {"GEMM_TK", "16 or 32: the elements of k per step of the float GEMMs (kernels/gemm_gpu.cl)"},
};

// The variable's options, empty where it is unset. Throws a usage Error for a macro not in kKernelTunables.
std::string user_build_options();
// "GEMM_TK (16 or 32: ...)", every tunable: for messages and --help.
std::string describe_kernel_tunables();

}  // namespace llamacl
