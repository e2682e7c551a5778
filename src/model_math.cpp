#include "llamacl/model_math.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstddef>
#include <cstring>
#include <type_traits>
#include <stdexcept>
#include <string>

#include "llamacl/row_shares.hpp"
#include "llamacl/vector_expf.hpp"

namespace llamacl {

namespace {

float widen(float w) { return w; }
float widen(std::uint16_t w) { return half_to_float(w); }

// run.c's matmul over weights that widen exactly to fp32, for rows [first, last).
template <typename Weight>
void matmul_rows(float* out, const float* x, const Weight* w, int n, int first, int last) {
    for (int i = first; i < last; i++) {
        const Weight* row = w + static_cast<std::size_t>(i) * n;
        float val = 0.0f;
        for (int j = 0; j < n; j++) val += widen(row[j]) * x[j];
        out[i] = val;
    }
}

// The same sums, kBlockRows rows at a time: a vector lane per row, each lane adding its row's products
// in run.c's order (j = 0, 1, ...; the product rounded, then added: no contraction, CMakeLists.txt), so
// every lane's bits are run.c's. Eight columns of the block's rows are loaded as rows and transposed, so
// that each step multiplies one column by one x[j]. kBlocks blocks go together, as one block's sums are
// a chain of dependent additions that would leave the core waiting on each; more would read more rows
// at once than the core's prefetchers follow. Long rows are prefetched kPrefetchAhead weights ahead each;
// rows shorter than kShortRowBytes end before the core's prefetchers learn them, so the next blocks'
// rows (contiguous) are prefetched instead, spread over this block's steps.
using Float8 = float __attribute__((vector_size(32)));
constexpr int kBlockRows = kRowBlockRows, kBlocks = 2, kPrefetchAhead = 64;
constexpr std::size_t kShortRowBytes = 8192;

#define LLAMACL_INLINE inline __attribute__((always_inline))

// Eight weights as floats. Native: compiled for the vector unit (vectorized below), where halves widen
// by the CPU's conversion (F16C) where the compiler has a half type; elsewhere bit by bit. Either is exact.
#if defined(__FLT16_MAX__)
using Half8 = _Float16 __attribute__((vector_size(16)));
#endif
template <bool Native>
LLAMACL_INLINE Float8 load8(const float* p) {
    Float8 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
template <bool Native>
LLAMACL_INLINE Float8 load8(const std::uint16_t* p) {
#if defined(__FLT16_MAX__)
    if constexpr (Native) {
        Half8 h;
        std::memcpy(&h, p, sizeof h);
        return __builtin_convertvector(h, Float8);
    }
#endif
    return Float8{widen(p[0]), widen(p[1]), widen(p[2]), widen(p[3]),
                  widen(p[4]), widen(p[5]), widen(p[6]), widen(p[7])};
}

// Column j of the eight rows from `rows` (rows of n weights), widened: the columns past a block's last
// whole step of eight.
template <typename Weight>
LLAMACL_INLINE Float8 column8(const Weight* rows, int n, int j) {
    Float8 c;
    for (int i = 0; i < 8; i++) c[i] = widen(rows[static_cast<std::size_t>(i) * n + j]);
    return c;
}

// c[k] = (r[0][k], ..., r[7][k]): the 8 x 8 transpose in three rounds of pairwise shuffles.
LLAMACL_INLINE void transpose8(const Float8 (&r)[8], Float8 (&c)[8]) {
    Float8 t[8], u[8];
    for (int i = 0; i < 8; i += 2) {
        t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 8, 1, 9, 4, 12, 5, 13);
        t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 10, 3, 11, 6, 14, 7, 15);
    }
    for (int i = 0; i < 8; i += 4) {
        for (int h = 0; h < 2; h++) {
            u[i + 2 * h] = __builtin_shufflevector(t[i + h], t[i + h + 2], 0, 1, 8, 9, 4, 5, 12, 13);
            u[i + 2 * h + 1] = __builtin_shufflevector(t[i + h], t[i + h + 2], 2, 3, 10, 11, 6, 7, 14, 15);
        }
    }
    for (int k = 0; k < 4; k++) {
        c[k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 8, 9, 10, 11);
        c[k + 4] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 12, 13, 14, 15);
    }
}

// Rows [first, first + blocks * kBlockRows) of the matmul.
template <typename Weight>
struct MatmulBlocks {
    template <bool Native>
    static LLAMACL_INLINE void run(float* out, const float* x, const Weight* w, int n, int first, int blocks) {
        Float8 acc[kBlocks] = {};
        const Weight* base = w + static_cast<std::size_t>(first) * n;
        const bool short_rows = static_cast<std::size_t>(n) * sizeof(Weight) < kShortRowBytes;
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            for (int b = 0; b < blocks; b++) {
                Float8 r[8], c[8];
                for (int i = 0; i < 8; i++) r[i] = load8<Native>(base + static_cast<std::size_t>(b * kBlockRows + i) * n + j);
                if (short_rows) {  // the next rows, a few lines a step, so they are all there when they start
                    const char* next = reinterpret_cast<const char*>(base + static_cast<std::size_t>(blocks * kBlockRows) * n);
                    const std::size_t step = static_cast<std::size_t>((j / 8) * blocks + b) * 8 * kBlockRows * sizeof(Weight);
                    for (std::size_t at = 0; at < 8 * kBlockRows * sizeof(Weight); at += 64) __builtin_prefetch(next + step + at);
                } else if (j % 16 == 0) {  // each row a line ahead, once per line
                    for (int i = 0; i < 8; i++)
                        __builtin_prefetch(base + static_cast<std::size_t>(b * kBlockRows + i) * n + j + kPrefetchAhead);
                }
                transpose8(r, c);
                for (int k = 0; k < 8; k++) acc[b] = acc[b] + c[k] * x[j + k];
            }
        }
        for (; j < n; j++)
            for (int b = 0; b < blocks; b++)
                acc[b] = acc[b] + column8(base + static_cast<std::size_t>(b * kBlockRows) * n, n, j) * x[j];
        for (int b = 0; b < blocks; b++) std::memcpy(out + first + b * kBlockRows, &acc[b], sizeof acc[b]);
    }
};

// Kernel::run compiled for the machine's vector unit: with AVX2 and F16C where the CPU has them (an
// 8-float vector is one register, a shuffle one instruction, a half's widening one conversion), else
// for the build's baseline. The arithmetic, and so the bits, are the same.
template <typename Kernel, typename... Args>
void run_baseline(Args... args) {
    Kernel::template run<false>(args...);
}
#if defined(__x86_64__)
template <typename Kernel, typename... Args>
__attribute__((target("avx2,f16c"))) void run_avx2(Args... args) {
    Kernel::template run<true>(args...);
}
// (CPUID leaf 1, ECX bit 29: not every compiler's __builtin_cpu_supports knows "f16c".)
bool cpu_has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}
bool cpu_has_avx2_f16c() {
    static const bool avx2 = __builtin_cpu_supports("avx2") && cpu_has_f16c();
    return avx2;
}
#endif
template <typename Kernel, typename... Args>
void vectorized(Args... args) {
#if defined(__x86_64__)
    if (cpu_has_avx2_f16c()) return run_avx2<Kernel>(args...);
#endif
    run_baseline<Kernel>(args...);
}

// Rows [first, last) of run.c's matmul over weights that widen exactly to fp32, kBlocks blocks at a
// time, the rest one by one.
constexpr int kBlockGroup = kBlocks * kBlockRows;
template <typename Weight>
void matmul_widened(float* out, const float* x, const Weight* w, int n, int first, int last) {
    int i = first;
    for (; i + kBlockGroup <= last; i += kBlockGroup) vectorized<MatmulBlocks<Weight>>(out, x, w, n, i, kBlocks);
    const int blocks = (last - i) / kBlockRows;
    if (blocks > 0) vectorized<MatmulBlocks<Weight>>(out, x, w, n, i, blocks);
    matmul_rows(out, x, w, n, i + blocks * kBlockRows, last);
}

// MatmulBlocks' sums from a laid-out copy of the matrix (lay_out_row_blocks): no transposes, and each
// block's run read in order, kLaidOutAhead steps of it prefetched ahead (a block's run is a stream the
// core's prefetchers pick up only after a while); the columns past the last whole step from the plain
// rows, as MatmulBlocks reads them.
constexpr int kLaidOutAhead = 16;
template <int blocks>
struct MatmulLaidOut {
    template <bool Native>
    static LLAMACL_INLINE void run(float* out, const float* x, const float* w, const float* laid, int n, int first) {
        Float8 acc[blocks] = {};
        const int steps = n / 8;
        const std::size_t block = static_cast<std::size_t>(kBlockRows) * n;  // a block's floats, in either layout
        const float* base = laid + static_cast<std::size_t>(first) * n;
        for (int s = 0; s < steps; s++) {
            for (int b = 0; b < blocks; b++) {
                const float* step = base + b * block + static_cast<std::size_t>(s) * 64;
                for (int line = 0; line < 64; line += 16) __builtin_prefetch(step + kLaidOutAhead * 64 + line);
                for (int k = 0; k < 8; k++) acc[b] = acc[b] + load8<Native>(step + 8 * k) * x[8 * s + k];
            }
        }
        for (int j = 8 * steps; j < n; j++)
            for (int b = 0; b < blocks; b++)
                acc[b] = acc[b] + column8(w + static_cast<std::size_t>(first + b * kBlockRows) * n, n, j) * x[j];
        for (int b = 0; b < blocks; b++) std::memcpy(out + first + b * kBlockRows, &acc[b], sizeof acc[b]);
    }
};

// Rows [first, last) of run.c's matmul, the whole blocks from the laid-out copy.
void matmul_laid_out(float* out, const float* x, const float* w, const float* laid, int n, int first, int last) {
    int i = std::min(last, (first + kBlockRows - 1) / kBlockRows * kBlockRows);
    matmul_rows(out, x, w, n, first, i);  // (rows before the share's first block)
    for (; i + kBlockGroup <= last; i += kBlockGroup) vectorized<MatmulLaidOut<kBlocks>>(out, x, w, laid, n, i);
    for (; i + kBlockRows <= last; i += kBlockRows) vectorized<MatmulLaidOut<1>>(out, x, w, laid, n, i);
    matmul_rows(out, x, w, n, i, last);
}

// A block of kBlockRows rows for kBatchInputs inputs at once (a prompt's positions): the block's columns
// loaded and transposed once for all of them, each input's sums formed as MatmulBlocks' (a lane per row,
// run.c's order), so each input's bits are matmul()'s.
constexpr int kBatchInputs = 8;
template <typename Weight>
struct MatmulBatchBlock {
    template <bool Native>
    static LLAMACL_INLINE void run(float* const* out, const float* const* x, const Weight* w, int n, int first) {
        Float8 acc[kBatchInputs] = {};
        const Weight* base = w + static_cast<std::size_t>(first) * n;
        int j = 0;
        for (; j + 8 <= n; j += 8) {
            Float8 r[8], c[8];
            for (int i = 0; i < 8; i++) r[i] = load8<Native>(base + static_cast<std::size_t>(i) * n + j);
            transpose8(r, c);
            for (int p = 0; p < kBatchInputs; p++)
                for (int k = 0; k < 8; k++) acc[p] = acc[p] + c[k] * x[p][j + k];
        }
        for (; j < n; j++) {
            const Float8 c = column8(base, n, j);
            for (int p = 0; p < kBatchInputs; p++) acc[p] = acc[p] + c * x[p][j];
        }
        for (int p = 0; p < kBatchInputs; p++) std::memcpy(out[p] + first, &acc[p], sizeof acc[p]);
    }
};

// A group's term of a Q8_0 row from its integer dot: runq.c's (float)ival * w_scale * x_scale, or ggml's
// vec_dot_q8_0_q8_0's sumi * (d_w * d_x).
template <QuantRule Rule>
LLAMACL_INLINE float q8_term(float ival, float w_scale, float x_scale) {
    if constexpr (Rule == QuantRule::ggml) return ival * (w_scale * x_scale);
    return ival * w_scale * x_scale;
}

// A quantized matrix's groups as the integer dot products read them: int8 values and a scale per group.
// Q8_0's as stored; Q4_0's nibbles less 8 (each an int8), its half scales widened (exact).
struct Q8Groups {
    const std::int8_t* q;
    const float* scales;
    int n, gs;
    LLAMACL_INLINE std::int32_t value(std::size_t row, int j) const { return q[row * n + j]; }
    LLAMACL_INLINE float scale(std::size_t row, int g) const { return scales[row * (n / gs) + g]; }
#if defined(__x86_64__)
    // Values 16 k .. 16 k + 15 of group g of a row.
    LLAMACL_INLINE __m128i word(std::size_t row, int g, int k) const {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + row * n + static_cast<std::size_t>(g) * gs + 16 * k));
    }
#endif
};
struct Q4Groups {
    const Q4Block* blocks;
    int n, gs;  // (gs: kQ4BlockSize)
    LLAMACL_INLINE const Q4Block& block(std::size_t row, int g) const { return blocks[row * (n / gs) + g]; }
    LLAMACL_INLINE std::int32_t value(std::size_t row, int j) const {
        const int i = j % kQ4BlockSize;
        const std::uint8_t byte = block(row, j / kQ4BlockSize).qs[i % 16];
        return (i < 16 ? byte & 0x0f : byte >> 4) - 8;
    }
    LLAMACL_INLINE float scale(std::size_t row, int g) const { return half_to_float(block(row, g).d); }
#if defined(__x86_64__)
    // Word 0: the low nibbles (elements 0 .. 15), word 1: the high ones (16 .. 31).
    LLAMACL_INLINE __m128i word(std::size_t row, int g, int k) const {
        const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block(row, g).qs));
        const __m128i nibbles = _mm_and_si128(k == 0 ? bytes : _mm_srli_epi16(bytes, 4), _mm_set1_epi8(0x0f));
        return _mm_sub_epi8(nibbles, _mm_set1_epi8(8));
    }
#endif
};

// The quantized matmul for rows [first, last): an exact integer dot product per group, then its term.
template <QuantRule Rule, typename Groups>
struct MatmulQ8Rows {
    template <bool Native>
    static LLAMACL_INLINE void run(float* out, const std::int8_t* xq, const float* xs, Groups w, int first, int last) {
        const int n = w.n, gs = w.gs;
        for (int i = first; i < last; i++) {
            const std::size_t row = static_cast<std::size_t>(i);
            float val = 0.0f;
            for (int j = 0; j < n; j += gs) {
                std::int32_t ival = 0;
                for (int k = 0; k < gs; k++) ival += static_cast<std::int32_t>(xq[j + k]) * w.value(row, j + k);
                val += q8_term<Rule>(static_cast<float>(ival), w.scale(row, j / gs), xs[j / gs]);
            }
            out[i] = val;
        }
    }
};

#if defined(__x86_64__)
// MatmulQ8Rows for a block of kBlockRows rows and Inputs inputs (AVX2, groups of a multiple of 16
// weights, at most kMaxBlockGroup): each group's weights are widened to 16 bits once for all the inputs
// (for one input, as they are read); an input's integer dots come from pairwise multiply-adds, the eight
// rows' summed across lanes together (integer sums: any order is exact); then each row's term is added
// in its lane, group after group (q8_terms), so every input's bits are MatmulQ8Rows'.
constexpr int kMaxBlockGroup = 256;

// q8_term of eight rows at once (a function of the AVX2 target: clang passes its vectors only there).
template <QuantRule Rule>
__attribute__((target("avx2"))) LLAMACL_INLINE __m256 q8_terms(__m256 ival, __m256 w_scale, __m256 x_scale) {
    if constexpr (Rule == QuantRule::ggml) return _mm256_mul_ps(ival, _mm256_mul_ps(w_scale, x_scale));
    return _mm256_mul_ps(_mm256_mul_ps(ival, w_scale), x_scale);
}

// Lane r: the sum of s[r]'s eight lanes.
__attribute__((target("avx2"))) LLAMACL_INLINE __m256i sum_each(const __m256i (&s)[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    // a: rows 0-3's sums of lanes 0-3, then of lanes 4-7; b: rows 4-7's.
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}

template <int Inputs, QuantRule Rule, typename Groups>
__attribute__((target("avx2"))) void matmul_q8_block(float* const* out, const MatmulInput* const* x, Groups w,
                                                     int first) {
    const int groups = w.n / w.gs, words = w.gs / 16;
    alignas(32) std::int16_t wide[kBlockRows][kMaxBlockGroup];
    alignas(32) float row_scales[kBlockRows];
    __m256 acc[Inputs];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int g = 0; g < groups; g++) {
        for (int r = 0; r < kBlockRows; r++) {
            const std::size_t row = static_cast<std::size_t>(first + r);
            if constexpr (Inputs > 1)
                for (int k = 0; k < words; k++)
                    _mm256_store_si256(reinterpret_cast<__m256i*>(&wide[r][16 * k]), _mm256_cvtepi8_epi16(w.word(row, g, k)));
            row_scales[r] = w.scale(row, g);
        }
        const __m256 ws = _mm256_load_ps(row_scales);
        for (int p = 0; p < Inputs; p++) {
            const std::int8_t* xq = x[p]->q() + static_cast<std::size_t>(g) * w.gs;
            __m256i s[kBlockRows];
            for (__m256i& v : s) v = _mm256_setzero_si256();
            for (int k = 0; k < words; k++) {
                const __m256i xw = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(xq + 16 * k)));
                for (int r = 0; r < kBlockRows; r++) {
                    // Word k of row r's group, widened: from `wide` for several inputs, as it is read for one.
                    __m256i wv;
                    if constexpr (Inputs > 1) wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(&wide[r][16 * k]));
                    else wv = _mm256_cvtepi8_epi16(w.word(static_cast<std::size_t>(first + r), g, k));
                    s[r] = _mm256_add_epi32(s[r], _mm256_madd_epi16(wv, xw));
                }
            }
            const __m256 term = q8_terms<Rule>(_mm256_cvtepi32_ps(sum_each(s)), ws, _mm256_set1_ps(x[p]->scales()[g]));
            acc[p] = _mm256_add_ps(acc[p], term);
        }
    }
    for (int p = 0; p < Inputs; p++) _mm256_storeu_ps(out[p] + first, acc[p]);
}
#endif

bool q8_block_fits(int gs) {
#if defined(__x86_64__)
    return gs % 16 == 0 && gs <= kMaxBlockGroup && cpu_has_avx2_f16c();
#else
    return false;
#endif
}

// Rows [first, last) of o for every input, kBatchInputs inputs and kBlockRows rows at a time through
// block(out, x, row) where the format has a block (block_fits), the rest input by input through
// single(out, x, first, last).
template <typename Block, typename Single>
void matmul_batch(const MatmulOutput& o, std::span<const MatmulInput> inputs, int first, int last, bool block_fits,
                  Block block, Single single) {
    std::size_t i = 0;
    for (; block_fits && i + kBatchInputs <= inputs.size(); i += kBatchInputs) {
        const MatmulInput* x[kBatchInputs];
        float* out[kBatchInputs];
        for (int p = 0; p < kBatchInputs; p++) {
            x[p] = &inputs[i + p];
            out[p] = o.out + (i + p) * o.stride;
        }
        int row = first;
        for (; row + kBlockRows <= last; row += kBlockRows) block(out, x, row);
        for (int p = 0; p < kBatchInputs; p++) single(out[p], *x[p], row, last);
    }
    for (; i < inputs.size(); i++) single(o.out + i * o.stride, inputs[i], first, last);
}

template <typename Weight>
void matmul_batch_widened(const MatmulOutput& o, std::span<const MatmulInput> inputs, const Weight* w, int first,
                          int last) {
    const int n = inputs.front().size();
    matmul_batch(
        o, inputs, first, last, true,
        [&](float* const* out, const MatmulInput* const* x, int row) {
            const float* xs[kBatchInputs];
            for (int p = 0; p < kBatchInputs; p++) xs[p] = x[p]->x();
            vectorized<MatmulBatchBlock<Weight>>(out, xs, w, n, row);
        },
        [&](float* out, const MatmulInput& x, int from, int to) {
            if constexpr (std::is_same_v<Weight, float>)
                if (o.w.row_blocks) return matmul_laid_out(out, x.x(), w, o.w.row_blocks, n, from, to);
            matmul_widened(out, x.x(), w, n, from, to);
        });
}

template <QuantRule Rule, typename Groups>
void matmul_batch_q8(const MatmulOutput& o, std::span<const MatmulInput> inputs, Groups w, int first, int last) {
    const bool fits = q8_block_fits(w.gs);
    // An input on its own still takes kBlockRows rows at a time where the block fits: its rows' integer
    // dots summed across lanes together.
    const auto single = [&](float* out, const MatmulInput& x, int from, int to) {
#if defined(__x86_64__)
        const MatmulInput* one[] = {&x};
        for (; fits && from + kBlockRows <= to; from += kBlockRows) matmul_q8_block<1, Rule>(&out, one, w, from);
#endif
        vectorized<MatmulQ8Rows<Rule, Groups>>(out, x.q(), x.scales(), w, from, to);
    };
    const auto block = [&](float* const* out, const MatmulInput* const* x, int row) {
#if defined(__x86_64__)
        matmul_q8_block<kBatchInputs, Rule>(out, x, w, row);
#endif
    };
    matmul_batch(o, inputs, first, last, fits, block, single);
}

// Rows [first, last) of output o for every input (o.out + i * o.stride for input i), by the weights' format.
void matmul_share(const MatmulOutput& o, std::span<const MatmulInput> inputs, int first, int last) {
    const WeightTensor& w = o.w;
    switch (w.format.type) {
        case ElementType::f32: matmul_batch_widened(o, inputs, w.f32(), first, last); return;
        case ElementType::f16: matmul_batch_widened(o, inputs, w.f16(), first, last); return;
        case ElementType::q8_0: {
            const int n = inputs.front().size(), gs = w.format.group_size;
            const Q8Groups groups{w.q8(), w.scales, n, gs};
            if (w.format.rule == QuantRule::ggml) return matmul_batch_q8<QuantRule::ggml>(o, inputs, groups, first, last);
            return matmul_batch_q8<QuantRule::runq>(o, inputs, groups, first, last);
        }
        case ElementType::q4_0: {
            const Q4Groups groups{w.q4(), inputs.front().size(), kQ4BlockSize};
            return matmul_batch_q8<QuantRule::ggml>(o, inputs, groups, first, last);
        }
    }
}

}  // namespace

void rmsnorm(float* out, const float* x, const float* weight, int size, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < size; j++) ss += x[j] * x[j];
    ss /= static_cast<float>(size);
    ss += eps;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < size; j++) out[j] = weight[j] * (ss * x[j]);
}

void matmul(float* out, const float* x, const float* w, int n, int d) {
    for_row_shares(d, kBlockGroup, static_cast<std::uint64_t>(n) * d,
                   [&](int first, int last) { matmul_widened(out, x, w, n, first, last); });
}

namespace {

// max |x| of a group as runq.c takes it (`if (val > wmax) wmax = val`: never a NaN).
float group_max(const float* x, int n) {
    float wmax = 0.0f;
    for (int i = 0; i < n; i++) {
        const float val = std::fabs(x[i]);
        if (val > wmax) wmax = val;
    }
    return wmax;
}

// (int8_t) of a rounded float as gcc compiles it on x86-64: the float becomes an int32 (out of range or
// NaN: INT32_MIN, what cvttss2si gives), whose low byte is kept. Only degenerate scales (a subnormal or
// infinite group maximum) leave [-127, 127].
std::int8_t to_int8(float r) {
    const std::int32_t whole =
        r >= -0x1p31f && r < 0x1p31f ? static_cast<std::int32_t>(r) : std::numeric_limits<std::int32_t>::min();
    return static_cast<std::int8_t>(whole);
}

}  // namespace

void quantize(std::int8_t* q, float* scales, const float* x, int n, int group_size) {
    for (int group = 0; group < n / group_size; group++) {
        const float* xg = x + static_cast<std::size_t>(group) * group_size;
        const float scale = group_max(xg, group_size) / 127.0f;
        scales[group] = scale;
        for (int i = 0; i < group_size; i++)
            q[static_cast<std::size_t>(group) * group_size + i] = to_int8(std::round(xg[i] / scale));
    }
}

void quantize_ggml(std::int8_t* q, float* scales, const float* x, int n, int group_size) {
    for (int group = 0; group < n / group_size; group++) {
        const float* xg = x + static_cast<std::size_t>(group) * group_size;
        const float d = group_max(xg, group_size) / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        scales[group] = half_to_float(float_to_half(d));
        for (int i = 0; i < group_size; i++)
            q[static_cast<std::size_t>(group) * group_size + i] = to_int8(std::round(xg[i] * id));
    }
}

void quantize_input(std::int8_t* q, float* scales, const float* x, int n, const WeightFormat& format) {
    if (format.rule == QuantRule::ggml) return quantize_ggml(q, scales, x, n, format.group_size);
    quantize(q, scales, x, n, format.group_size);
}

std::uint16_t float_to_half(float f) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &f, sizeof bits);
    const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
    const std::uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);  // NaN stays NaN
    if (magnitude >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: inf
    if (magnitude < 0x38800000u) {
        // Below the smallest normal half (2^-14): a multiple of 2^-24, rounded to even; 1024 of them is
        // that smallest normal, whose encoding is the same number.
        float value = 0.0f;
        std::memcpy(&value, &magnitude, sizeof value);
        return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(value * 0x1p24f)));
    }
    // Rebias the exponent (127 -> 15) and drop 13 mantissa bits, to nearest even; a carry into the
    // exponent is the correct next power of two.
    std::uint32_t half = (magnitude - 0x38000000u) >> 13;
    const std::uint32_t rest = magnitude & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;
    return static_cast<std::uint16_t>(sign | half);
}

float half_to_float(std::uint16_t half) {
    const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
    const std::uint32_t exponent = (half >> 10) & 0x1fu, mantissa = half & 0x3ffu;
    float f = 0.0f;
    if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in fp32
        f = static_cast<float>(mantissa) * 0x1p-24f;
        if (sign) f = -f;
        return f;
    }
    // Normal numbers rebias the exponent (15 -> 127); infinities and NaNs keep the all-ones exponent.
    const std::uint32_t bits = sign | (exponent == 0x1f ? 0x7f800000u : (exponent + 112u) << 23) | mantissa << 13;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

void dequantize(float* out, const WeightTensor& w, std::uint64_t n) {
    switch (w.format.type) {
        case ElementType::f32: std::memcpy(out, w.f32(), n * sizeof(float)); return;
        case ElementType::f16:
            for (std::uint64_t i = 0; i < n; i++) out[i] = half_to_float(w.f16()[i]);
            return;
        case ElementType::q8_0: {
            const std::uint64_t gs = static_cast<std::uint64_t>(w.format.group_size);
            for (std::uint64_t i = 0; i < n; i++) out[i] = w.q8()[i] * w.scales[i / gs];
            return;
        }
        case ElementType::q4_0: {
            const Q4Groups groups{w.q4(), kQ4BlockSize, kQ4BlockSize};  // (rows of one block)
            for (std::uint64_t i = 0; i < n; i++) {
                const std::uint64_t b = i / kQ4BlockSize;
                out[i] = static_cast<float>(groups.value(b, static_cast<int>(i % kQ4BlockSize))) * groups.scale(b, 0);
            }
            return;
        }
    }
}

MatmulInput::MatmulInput(const WeightFormat& format, int n) : format_(format), n_(n) {
    if (format.quantized()) {
        q_.resize(static_cast<std::size_t>(n));
        scales_.resize(static_cast<std::size_t>(n / format.group_size));
    }
}

void MatmulInput::set(const float* x) {
    x_ = x;
    if (format_.quantized()) quantize_input(q_.data(), scales_.data(), x, n_, format_);
}

void matmul(float* out, const MatmulInput& x, const WeightTensor& w, int d) { matmuls(x, {{out, w, d}}); }

void matmuls(const MatmulInput& x, std::initializer_list<MatmulOutput> outputs) {
    matmuls(std::span<const MatmulInput>(&x, 1), outputs);
}

void matmuls(std::span<const MatmulInput> inputs, std::initializer_list<MatmulOutput> outputs) {
    const WeightFormat& format = inputs.front().format();
    const int n = inputs.front().size();
    int rows = 0;
    for (const MatmulOutput& o : outputs) {
        if (!(format == o.w.format)) throw std::logic_error("matmul: the input is prepared for another weight format");
        rows += o.d;
    }
    // The products' rows one after another, shared as one matmul's; a share that spans two products
    // takes its part of each. A batch's chunks hold about kChunkBytes of weights (the core's first-level
    // cache), whole blocks of rows, so that every input after the first reads them from the cache.
    constexpr std::uint64_t kChunkBytes = 32 << 10;
    const int align = format.quantized() ? kBlockRows : kBlockGroup;
    const int fitting = static_cast<int>(kChunkBytes / format.bytes(static_cast<std::uint64_t>(n)));
    const int chunk = inputs.size() == 1 ? rows : std::max(align, fitting / align * align);
    const std::uint64_t work = static_cast<std::uint64_t>(n) * rows * inputs.size();
    for_row_shares(rows, align, work, [&](int first, int last) {
        for (int from = first; from < last; from += chunk) {
            const int to = std::min(last, from + chunk);
            int start = 0;
            for (const MatmulOutput& o : outputs) {
                const int lo = std::max(from, start), hi = std::min(to, start + o.d);
                if (lo < hi) matmul_share(o, inputs, lo - start, hi - start);
                start += o.d;
            }
        }
    });
}

namespace {

void check_factors(const Rope& r) {
    if (!r.factors.empty() && r.factors.size() != static_cast<std::size_t>(r.head_size / 2))
        throw std::invalid_argument("rope: " + std::to_string(r.factors.size()) + " factors for heads of " +
                                    std::to_string(r.head_size));
}

}  // namespace

float Rope::angle(int pos, int i) const {
    // run.c's val = pos * freq; a factor divides it (dividing by 1 would change no bit).
    const float freq = 1.0f / powf(base, static_cast<float>(i) / static_cast<float>(head_size));
    const float val = static_cast<float>(pos) * freq;
    return factors.empty() ? val : val / factors[static_cast<std::size_t>(i / 2)];
}

void rope(float* q, float* k, int pos, int dim, int kv_dim, const Rope& r) {
    check_factors(r);
    // Rotate each (even, odd) pair by its angle (Rope); keys exist for i < kv_dim only.
    for (int i = 0; i < dim; i += 2) {
        const float val = r.angle(pos, i % r.head_size);
        const float fcr = cosf(val);
        const float fci = sinf(val);
        const int rotn = i < kv_dim ? 2 : 1;
        for (int v = 0; v < rotn; v++) {
            float* vec = v == 0 ? q : k;
            const float v0 = vec[i];
            const float v1 = vec[i + 1];
            vec[i] = v0 * fcr - v1 * fci;
            vec[i + 1] = v0 * fci + v1 * fcr;
        }
    }
}

std::vector<float> rope_table(int seq_len, const Rope& r) {
    std::vector<float> table(static_cast<std::size_t>(seq_len) * r.head_size);
    rope_rows(table.data(), 0, seq_len, r);
    return table;
}

void rope_rows(float* out, int first, int count, const Rope& r) {
    check_factors(r);
    for (int pos = first; pos < first + count; ++pos) {
        float* row = out + static_cast<std::size_t>(pos - first) * r.head_size;
        for (int i = 0; i < r.head_size; i += 2) {
            const float val = r.angle(pos, i);
            row[i] = cosf(val);
            row[i + 1] = sinf(val);
        }
    }
}

void swiglu(float* hb, const float* hb2, int hidden_dim) {
    // silu(x) = x * sigmoid(x), with expf(-x) taken a block of values at a time (vector_expf.hpp)
    constexpr int kBlock = 64;
    float e[kBlock];
    for (int at = 0; at < hidden_dim; at += kBlock) {
        const int n = std::min(kBlock, hidden_dim - at);
        for (int i = 0; i < n; i++) e[i] = -hb[at + i];
        expf_each(e, n);
        for (int i = 0; i < n; i++) {
            float val = hb[at + i];
            val *= (1.0f / (1.0f + e[i]));
            val *= hb2[at + i];
            hb[at + i] = val;
        }
    }
}

void classify(const Config& c, const float* rms_final, const WeightTensor& classifier, const float* hidden,
              float* normed, float* logits) {
    // run.c normalizes x in place; normalizing into a separate buffer computes the same values.
    rmsnorm(normed, hidden, rms_final, c.dim, c.norm_eps);
    MatmulInput input(classifier.format, c.dim);  // runq.c quantizes the normalized x here
    input.set(normed);
    matmul(logits, input, classifier, c.vocab_size);
}

void lay_out_row_blocks(float* out, const float* w, int n, int first, int last) {
    const int steps = n / 8;
    for (int row = first; row + kBlockRows <= last; row += kBlockRows) {
        float* block = out + static_cast<std::size_t>(row) * n;
        for (int s = 0; s < steps; s++)
            for (int k = 0; k < 8; k++)
                for (int i = 0; i < kBlockRows; i++)
                    block[static_cast<std::size_t>(s) * 64 + k * kBlockRows + i] =
                        w[static_cast<std::size_t>(row + i) * n + 8 * s + k];
    }
}

}  // namespace llamacl
