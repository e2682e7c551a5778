// The device's prefill (DeviceForward::prefill, kernels/prefill.cl) against the same device running the
// positions one at a time: every position's logits and the KV cache it leaves (seen through the next
// position's logits), for prompts of one position, either side of a batch's edge and the whole context,
// from position 0 and from the middle of a sequence, for the shape families, streamed and resident
// layers and both finalize modes; and greedy decoding on the device after a prefill.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "llamacl/device_forward.hpp"
#include "llamacl/export.hpp"
#include "llamacl/sampler.hpp"
#include "models.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

struct PrefillCase {
    const char* name;
    const char* shape;
    int layers_per_offload;
    Finalize finalize;
    std::optional<ElementType> weights = std::nullopt;  // --weights
};

class DevicePrefill : public ::testing::TestWithParam<PrefillCase> {};

std::vector<int> some_tokens(int n, int vocab) {
    std::vector<int> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back((i * 37 + 11) % vocab);
    return tokens;
}

// On the CPU families every prefill kernel sums in the decode kernels' order, so the logits are the same
// bits; the GPU family's GEMM sums in run.c's order where the decode kernels reassociate (with Q8_0
// weights a last-bit difference may also round an activation to the next integer: `tolerance`).
void expect_same_logits(std::span<const float> got, std::span<const float> want, bool exact, const std::string& what,
                        double tolerance = 1e-4) {
    ASSERT_EQ(got.size(), want.size()) << what;
    if (exact) {
        EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << what << ": not the same bits";
        return;
    }
    double err = 0, scale = 1;
    for (std::size_t i = 0; i < want.size(); ++i) {
        err = std::max(err, static_cast<double>(std::fabs(got[i] - want[i])));
        scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
    }
    EXPECT_LT(err / scale, tolerance) << what;
}

}  // namespace

TEST_P(DevicePrefill, EveryPositionMatchesThePositionByPositionPass) {
    const PrefillCase& p = GetParam();
    TempDir dir;
    const Config c{36, 100, 3, 6, 2, 300, 150, true};
    const Checkpoint ck = with_weights(Checkpoint::open(write_model(dir, c, 0, 17).string()), p.weights);
    Device device = Device::open("", "");
    DeviceOptions options;
    options.layers_per_offload = p.layers_per_offload;
    options.finalize = p.finalize;
    options.shape = parse_launch_shape(p.shape, device.info());
    DeviceForward batched(device, ck, options), single(device, ck, options);
    const bool exact = !options.shape->gpu_family();
    const double tolerance = p.weights ? 0.05 : 1e-4;
    const int b = batched.prefill_batch();
    ASSERT_GE(b, 1);
    const std::vector<int> tokens = some_tokens(c.seq_len, c.vocab_size);

    // (first position, positions): from the start and after decoded positions, ending before, at and after a
    // batch's edge, and at the end of the context.
    const std::vector<std::pair<int, int>> prompts = {
        {0, 1}, {0, 3}, {0, std::min(b, c.seq_len)}, {0, std::min(b + 1, c.seq_len)}, {5, std::min(2 * b, c.seq_len - 5)},
        {0, c.seq_len}, {c.seq_len - 1, 1}};
    for (const auto& [first, n] : prompts) {
        SCOPED_TRACE("positions " + std::to_string(first) + ".." + std::to_string(first + n - 1) + ", batch " +
                     std::to_string(b));
        // Positions before `first` decoded one at a time by both.
        for (int pos = 0; pos < first; ++pos) {
            batched.forward(tokens[pos], pos);
            single.forward(tokens[pos], pos);
        }
        std::vector<std::vector<float>> want;
        for (int i = 0; i < n; ++i) {
            const std::span<float> l = single.forward(tokens[first + i], first + i);
            want.emplace_back(l.begin(), l.end());
        }
        const std::span<const int> prompt = std::span<const int>(tokens).subspan(first, n);
        int seen = 0;
        const std::span<float> last = batched.prefill(prompt, first, [&](int pos, std::span<float> logits) {
            ASSERT_EQ(pos, first + seen);
            expect_same_logits(logits, want[seen], exact, "position " + std::to_string(pos), tolerance);
            ++seen;
        });
        EXPECT_EQ(seen, n);
        expect_same_logits(last, want.back(), exact, "the returned logits", tolerance);
        // Only the last position's logits asked for.
        expect_same_logits(batched.prefill(prompt, first), want.back(), exact, "the last position alone", tolerance);
        // The cache the prefill left: the next position reads every row of it.
        if (first + n < c.seq_len) {
            const std::vector<float> next_want = [&] {
                const std::span<float> l = single.forward(3, first + n);
                return std::vector<float>(l.begin(), l.end());
            }();
            expect_same_logits(batched.forward(3, first + n), next_want, exact, "the position after the prompt",
                               tolerance);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DevicePrefill,
    ::testing::Values(PrefillCase{"exact_resident", "exact", 3, Finalize::device},
                      PrefillCase{"cpu_resident", "cpu", 3, Finalize::device},
                      PrefillCase{"cpu_streamed_finalize_cpu", "cpu", 1, Finalize::cpu},
                      PrefillCase{"gpu_streamed", "gpu", 2, Finalize::device},
                      PrefillCase{"gpu_finalize_cpu", "gpu", 3, Finalize::cpu},
                      PrefillCase{"small_groups", "2x2", 3, Finalize::device},
                      PrefillCase{"exact_streamed_q8_0", "exact", 2, Finalize::device, ElementType::q8_0},
                      PrefillCase{"cpu_finalize_cpu_q8_0", "cpu", 3, Finalize::cpu, ElementType::q8_0},
                      PrefillCase{"gpu_streamed_q8_0", "gpu", 1, Finalize::device, ElementType::q8_0},
                      PrefillCase{"small_groups_q8_0", "2x2", 3, Finalize::device, ElementType::q8_0}),
    [](const auto& p) { return std::string(p.param.name); });

// generate's greedy path: the prompt but its last token prefilled, then the device decodes from the last.
TEST(DevicePrefill, GreedyDecodingContinuesAfterAPrefill) {
    TempDir dir;
    const Config c{36, 100, 3, 6, 2, 300, 100, true};
    const Checkpoint ck = Checkpoint::open(write_model(dir, c, 0, 21).string());
    Device device = Device::open("", "");
    DeviceForward model(device, ck, {});
    GreedyDecoder* greedy = model.greedy_decoder();
    ASSERT_NE(greedy, nullptr);
    const std::vector<int> prompt = some_tokens(80, c.vocab_size);
    // The host's argmax after forward() position by position.
    std::vector<int> want = {prompt[0]};
    for (int pos = 0; pos < c.seq_len; ++pos) {
        const int next = sample_argmax(model.forward(want.back(), pos));
        want.push_back(pos + 1 < static_cast<int>(prompt.size()) ? prompt[pos + 1] : next);
    }
    const int n = static_cast<int>(prompt.size());
    model.prefill(std::span<const int>(prompt).first(n - 1), 0);
    greedy->start(n - 1, std::span<const int>(prompt).subspan(n - 1), c.seq_len);
    std::vector<int> got(prompt.begin(), prompt.end());
    for (int pos = n - 1; pos < c.seq_len; ++pos) got.push_back(greedy->next(pos));
    EXPECT_EQ(got, want);
}
