// How many times the host holds the weights: on a CPU device the kernels read float weights in place.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <filesystem>
#include <string>

#include "llamacl/checkpoint.hpp"
#include "models.hpp"
#include "support.hpp"

namespace llamacl {
namespace {

using test::CommandResult;
using test::quote;
using test::TempDir;

// The host's peak memory grows by the weights once, not twice: the mapped file's pages, and no copy of
// them (a CPU device reads them in place; a GPU's copies are in its own memory). This process opens no
// device, which would make its own peak larger than the command's (below).
TEST(WeightStaging, TheHostHoldsFloatWeightsOnce) {
    TempDir dir;
    Config shallow{256, 768, 4, 8, 8, 512, 64, true};
    Config deep = shallow;
    deep.n_layers = 12;
    const auto shallow_model = test::write_model(dir, shallow, 1, 7, "shallow.bin");
    const auto deep_model = test::write_model(dir, deep, 1, 7, "deep.bin");
    const auto peak = [&](const std::filesystem::path& model) {
        const CommandResult r = test::run_llama_cl("generate " + quote(model.string()) + " -z " +
                                                   quote((dir / "tok.bin").string()) + " -n 4 -s 1 --backend opencl");
        EXPECT_EQ(r.exit_code, 0) << r.err;
        return r.peak_rss_kib;
    };
    // A first run of each builds its kernels (the token kernel has the model's shape compiled in) into
    // PoCL's cache, so that the compiler's memory counts in neither measured run.
    peak(shallow_model);
    peak(deep_model);
    const long shallow_kib = peak(shallow_model), deep_kib = peak(deep_model);
    // A spawned command's peak starts from this process's own (it shares this address space until its
    // exec), so a test process larger than the command (under AddressSanitizer, or after other tests in
    // it) hides what the command used.
    rusage self{};
    getrusage(RUSAGE_SELF, &self);
    if (shallow_kib <= self.ru_maxrss)
        GTEST_SKIP() << "this process's peak (" << self.ru_maxrss << " KiB) hides the command's (" << shallow_kib
                     << " KiB)";
    const long extra_kib = (ModelSize(deep).weight_bytes() - ModelSize(shallow).weight_bytes()) >> 10;
    const long grown_kib = deep_kib - shallow_kib;
    EXPECT_GT(grown_kib, extra_kib / 2);  // the kernels did read every layer
    EXPECT_LT(grown_kib, extra_kib * 3 / 2) << "8 more layers of " << extra_kib << " KiB grew the peak by " << grown_kib
                                            << " KiB: a copy of the weights beside the mapped file's pages";
}

}  // namespace
}  // namespace llamacl
