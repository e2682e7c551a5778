#pragma once
// run.c's expf over arrays (softmax, SiLU), four at a time where the CPU has AVX2 and FMA: the same bits
// as the C library's expf, which the contract needs, in a fraction of its time.

#include <array>
#include <cstdint>

namespace llamacl {

// glibc's expf's table of 2^(i/32), i < 32, as the bits of doubles with i << 47 taken off, so that adding
// k << 47 to entry k % 32 scales it to 2^(k/32) (the exact shape's kernels/expf.cl takes it too).
extern const std::array<std::uint64_t, 32> kGlibcExp2Table;

// x[i] = expf(x[i]) for i < n, each bit for bit what this process's expf returns.
void expf_each(float* x, int n);

// Whether this process's expf is x86-64 glibc's build for CPUs with FMA (glibc picks it at load time on
// such CPUs), whose every multiply-add is fused; else its plain build, or another library's.
bool glibc_expf_fused();

// Whether expf_each computes with vectors here: AVX2 and FMA, and the library's expf found to be one of
// glibc's two builds (a check of the vectors against it on a spread of inputs, once); else it calls expf.
bool expf_each_vectorized();

}  // namespace llamacl
