// The host's kernel signatures (kernel_args.hpp), which every binding list of the runtime is checked
// against as it binds, against the kernels as the device compiles them: every program of every shape
// family the device builds, with -cl-kernel-arg-info, must have exactly the listed arguments (count, order,
// names), so that a reordered or renamed argument fails here instead of corrupting memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llamacl/bandwidth_probes.hpp"
#include "llamacl/device.hpp"
#include "llamacl/error.hpp"
#include "llamacl/kernel_args.hpp"
#include "llamacl/kernel_set.hpp"

using namespace llamacl;

namespace {

Device& test_device() {
    static Device device = Device::open("", "");
    return device;
}

const KernelSignature& signature_of(const std::string& kernel) {
    const auto all = kernel_signatures();
    const auto at = std::find_if(all.begin(), all.end(), [&](const KernelSignature* s) { return s->kernel == kernel; });
    if (at == all.end()) throw std::logic_error("no signature for " + kernel);
    return **at;
}

// The kernel's arguments as the compiler names them.
std::vector<std::string> compiled_args(const cl::Kernel& kernel) {
    std::vector<std::string> names;
    const cl_uint count = kernel.getInfo<CL_KERNEL_NUM_ARGS>();
    for (cl_uint i = 0; i < count; ++i) {
        std::string name = kernel.getArgInfo<CL_KERNEL_ARG_NAME>(i);
        name.erase(std::find(name.begin(), name.end(), '\0'), name.end());
        names.push_back(name);
    }
    return names;
}

void expect_signature(const cl::Kernel& kernel) {
    std::string name = kernel.getInfo<CL_KERNEL_FUNCTION_NAME>();
    name.erase(std::find(name.begin(), name.end(), '\0'), name.end());
    SCOPED_TRACE(name);
    const KernelSignature& signature = signature_of(name);
    const std::vector<std::string> listed(signature.args.begin(), signature.args.end());
    EXPECT_EQ(compiled_args(kernel), listed);
}

// A small model's shape for the token kernel's build (token.cl compiles it in).
const char* const kTokenModel =
    " -DDIM=64 -DKV_DIM=32 -DHIDDEN_DIM=96 -DN_LAYERS=2 -DN_HEADS=4 -DKV_MUL=2 -DSEQ_LEN=16 -DVOCAB=100"
    " -DSTRIDE_NORM=64 -DSTRIDE_ATTN=4096 -DSTRIDE_KV=2048 -DSTRIDE_FFN=6144 -DSTRIDE_CACHE=512";

// Every shape family, built for each weight format the kernels read.
class KernelSignatures : public ::testing::TestWithParam<std::tuple<const char*, ElementType>> {};

TEST_P(KernelSignatures, MatchTheCompiledKernels) {
    Device& device = test_device();
    const auto [shape, weights] = GetParam();
    const bool q8 = weights == ElementType::q8_0;
    KernelSet kernels(device, parse_launch_shape(shape, device.info()), WeightFormat{weights, q8 ? 4 : 0}, true,
                      "-cl-kernel-arg-info");
    const KernelSet::OwnBuild& own = kernels.own();
    for (const cl::Kernel* k : {&own.attention, &own.rmsnorm, &own.argmax, &own.argmax_embed}) expect_signature(*k);
    // Q8_0 builds alone quantize prefill's inputs and run RoPE and SwiGLU after its unfused products.
    for (const cl::Kernel* k : {&own.quantize_rows, &own.rope_rows, &own.swiglu}) {
        EXPECT_EQ((*k)() != nullptr, q8);
        if (q8) expect_signature(*k);
    }
    using Matvec = KernelSet::Matvec;
    for (Matvec which : {Matvec::attn_qkv_rope, Matvec::matvec_residual, Matvec::ffn_gate_up, Matvec::classifier})
        expect_signature(*kernels.matvec(which, 64, 64).kernel);
    // Prefill's: the products of every tile's build (Q8_0's: gemm alone, of the shape's own build off tensor
    // cores), and attention_tiles where the shape has it.
    for (const cl::Kernel* k : {&own.rmsnorm_rows, &own.attention_rows}) expect_signature(*k);
    if (kernels.shape().gpu_family()) expect_signature(own.attention_tiles);
    using Gemm = KernelSet::Gemm;
    for (const GemmTile& tile : kGemmTiles) {
        expect_signature(*kernels.gemm(Gemm::gemm, {64}, 64, tile).kernel);
        for (Gemm which : {Gemm::qkv_rope, Gemm::gate_up}) {
            if (q8)
                EXPECT_THROW(kernels.gemm(which, {64}, 64, tile), std::logic_error);
            else
                expect_signature(*kernels.gemm(which, {64}, 64, tile).kernel);
        }
    }
    if (!kernels.device_fences()) return;  // no token kernel without OpenCL C 2.0 (CPU shapes)
    cl::Program token;
    try {
        token = kernels.token_program(kTokenModel, 64, 96);
    } catch (const Error& e) {
        GTEST_SKIP() << "the device does not build the token kernel: " << e.what();
    }
    expect_signature(cl::Kernel(token, "forward_token"));
}

// bench's probes (kernels/copy.cl): copy_f32 and fma_f32 as every program builds them, the tensor-core
// probes where the device has tensor cores.
TEST(KernelBinding, ProbesMatchTheCompiledKernels) {
    Device& device = test_device();
    KernelSet kernels(device, parse_launch_shape("gpu", device.info()), WeightFormat{}, true, "-cl-kernel-arg-info");
    const cl::Program& program = kernels.own().program;
    for (const char* name : {"copy_f32", "fma_f32"}) expect_signature(cl::Kernel(program, name));
    if (!kernels.tensor_cores()) GTEST_SKIP() << "no tensor cores: mma_tf32 and mma_s8 are not built";
    const cl::Program mma = mma_probe_program(device, "-cl-kernel-arg-info");
    for (const char* name : {"mma_tf32", "mma_s8"}) expect_signature(cl::Kernel(mma, name));
}

// Every kernel of the programs has a signature.
TEST(KernelBinding, EveryKernelHasASignature) {
    Device& device = test_device();
    // Float builds, and Q8_0's, which have quantize_rows too.
    for (const WeightFormat& weights : {WeightFormat{}, WeightFormat{ElementType::q8_0, 4}}) {
        KernelSet kernels(device, parse_launch_shape("exact", device.info()), weights, true, "-cl-kernel-arg-info");
        const cl::Program& program = kernels.own().program;
        std::string names = program.getInfo<CL_PROGRAM_KERNEL_NAMES>();
        names.erase(std::find(names.begin(), names.end(), '\0'), names.end());
        std::istringstream in(names);
        int count = 0;
        for (std::string name; std::getline(in, name, ';'); ++count)
            EXPECT_NO_THROW(signature_of(name)) << name;
        EXPECT_GE(count, 8);
    }
}

TEST(KernelBinding, RefusesANameTheKernelLacks) {
    Device& device = test_device();
    KernelSet kernels(device, parse_launch_shape("exact", device.info()));
    EXPECT_THROW(bind_args(kernels.own().rmsnorm, signatures::rmsnorm, {{"dim", 3}}), std::logic_error);
    EXPECT_NO_THROW(bind_args(kernels.own().rmsnorm, signatures::rmsnorm, {{"n", 3}}));
}

INSTANTIATE_TEST_SUITE_P(ShapeFamilies, KernelSignatures,
                         ::testing::Combine(::testing::Values("exact", "cpu", "gpu"),
                                            ::testing::Values(ElementType::f32, ElementType::f16, ElementType::q8_0)),
                         [](const auto& p) {
                             return std::string(std::get<0>(p.param)) + "_" + element_name(std::get<1>(p.param));
                         });

}  // namespace
