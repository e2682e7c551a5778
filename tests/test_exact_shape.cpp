// The exact work shape on a device: run.c's loops in run.c's order and glibc's expf (kernels/expf.cl),
// so its logits equal the CPU reference's bit for bit. --compare-cpu --tolerance 0 checks every boundary
// of every position; top-p sampling, which reorders near-equal probabilities on any difference, must then
// print the reference's text. Random stories15M-shape weights give the flat distributions where the
// default shapes' last-bit differences change top-p's choice.
#include <gtest/gtest.h>

#include "llamacl/synthetic.hpp"
#include "models.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

std::string last_line(std::string text) {
    while (!text.empty() && text.back() == '\n') text.pop_back();
    const std::size_t at = text.rfind('\n');
    return at == std::string::npos ? text : text.substr(at + 1);
}

}  // namespace

TEST(ExactShape, LogitsAndTextEqualTheReferenceOverWholeGenerations) {
    TempDir dir;
    const Config c = *preset_config("stories15M");
    const std::string model = quote(write_model(dir, c).string()), tok = quote((dir / "tok.bin").string());
    // Greedy, then top-p with the seeds that diverged before the device's exp was glibc's.
    for (const std::string sampling : {"-t 0", "-t 1.0 -p 0.9 -s 5", "-t 1.0 -p 0.9 -s 6"}) {
        SCOPED_TRACE(sampling);
        const std::string run = "generate " + model + " -z " + tok + " " + sampling + " -n 200 -i 'Once upon a time'";
        const CommandResult reference = run_llama_cl(run + " --backend cpu");
        ASSERT_EQ(reference.exit_code, 0) << reference.err;
        const CommandResult exact =
            run_llama_cl(run + " --backend opencl --work-shape exact --compare-cpu --tolerance 0");
        ASSERT_EQ(exact.exit_code, 0) << exact.err;
        EXPECT_EQ(last_line(exact.err), "compare-cpu: no divergence over 200 tokens (max abs err 0)");
        EXPECT_EQ(exact.out, reference.out);
    }
}

// The same for Q8_0 weights (--weights q8_0, groups of 32): runq.c's quantization of every product's input
// turns any last-bit difference into a whole step of a group, so this is the sharper test.
TEST(ExactShape, Q80LogitsAndTextEqualTheReferenceOverWholeGenerations) {
    TempDir dir;
    const Config c = *preset_config("stories15M");
    const std::string model = quote(write_model(dir, c).string()), tok = quote((dir / "tok.bin").string());
    for (const std::string sampling : {"-t 0", "-t 1.0 -p 0.9 -s 5"}) {
        SCOPED_TRACE(sampling);
        const std::string run = "generate " + model + " -z " + tok + " " + sampling +
                                " -n 120 -i 'Once upon a time' --weights q8_0";
        const CommandResult reference = run_llama_cl(run + " --backend cpu");
        ASSERT_EQ(reference.exit_code, 0) << reference.err;
        const CommandResult exact =
            run_llama_cl(run + " --backend opencl --work-shape exact --compare-cpu --tolerance 0");
        ASSERT_EQ(exact.exit_code, 0) << exact.err;
        EXPECT_EQ(last_line(exact.err), "compare-cpu: no divergence over 120 tokens (max abs err 0)");
        EXPECT_EQ(exact.out, reference.out);
    }
}

TEST(ExactShape, ToleranceZeroStillFindsAnInjectedFault) {
    TempDir dir;
    const std::string model = quote(write_model(dir, small_config()).string()), tok = quote((dir / "tok.bin").string());
    const CommandResult r = run_command("LLAMACL_INJECT_FAULT=layer:1,op:v " + quote(LLAMACL_BINARY) + " generate " +
                                        model + " -z " + tok +
                                        " -t 0 -n 8 --backend opencl --work-shape exact --compare-cpu --tolerance 0");
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(last_line(r.err).find("first divergence at token 0, layer 1, v:"), std::string::npos) << r.err;
}
