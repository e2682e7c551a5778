// libFuzzer target: the checkpoint header parser and tensor mapper (Checkpoint::from_image, the same
// code Checkpoint::open runs on a mapped file), then, for what it accepts, a read of every byte of every
// tensor view and a few steps of the CPU reference forward pass and the sampler. Built with
// -fsanitize=fuzzer,address,undefined (cmake -DLLAMACL_FUZZ=ON with clang): a view reaching past the
// image is a heap-buffer-overflow, an int overflow in size arithmetic a UBSan report.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "llamacl/checkpoint.hpp"
#include "llamacl/error.hpp"
#include "llamacl/reference.hpp"
#include "llamacl/sampler.hpp"

namespace {

std::uint32_t touch(const void* p, std::uint64_t bytes) {
    std::uint32_t acc = 0;
    for (std::uint64_t i = 0; i < bytes; ++i) acc ^= static_cast<std::uint32_t>(static_cast<const std::uint8_t*>(p)[i]) + static_cast<std::uint32_t>(i);
    return acc;
}

// Every byte of a tensor of n weights: its values, and a Q8_0 tensor's scales.
std::uint32_t touch(const llamacl::WeightTensor& t, std::uint64_t n) {
    if (t.format.type != llamacl::ElementType::q8_0) return touch(t.values, t.format.bytes(n));
    return touch(t.values, n) + touch(t.scales, n / static_cast<std::uint64_t>(t.format.group_size) * sizeof(float));
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "fuzz_checkpoint: %s\n", what);
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    llamacl::HostBytes image(size);
    if (size > 0) std::memcpy(image.data(), data, size);
    try {
        const llamacl::Checkpoint ck = llamacl::Checkpoint::from_image(std::move(image), "fuzz.bin");
        const llamacl::Config& c = ck.config();
        if (c.dim <= 0 || c.hidden_dim <= 0 || c.n_layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
            c.vocab_size <= 0 || c.seq_len <= 0 || c.dim % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0 ||
            c.head_size() % 2 != 0)
            fail("accepted an invalid shape");
        const int gs = c.weight_format.group_size;
        if (c.weight_format.type == llamacl::ElementType::q8_0 && (gs <= 0 || c.dim % gs != 0 || c.hidden_dim % gs != 0))
            fail("accepted a group size that does not divide every row");
        const llamacl::ModelSize model(c);
        if (model.weight_bytes() > size) fail("the weights are larger than the file");

        const std::uint64_t dim = c.dim, hidden = c.hidden_dim, kv = c.kv_dim(), vocab = c.vocab_size;
        volatile std::uint32_t sink = 0;
        sink = sink + touch(ck.token_embedding(), vocab * dim * sizeof(float));
        sink = sink + touch(ck.classifier(), vocab * dim);
        sink = sink + touch(ck.rms_final(), dim * sizeof(float));
        for (int l = 0; l < c.n_layers; ++l) {
            const llamacl::LayerWeights w = ck.layer(l);
            sink = sink + touch(w.rms_att, dim) + touch(w.wq, dim * dim) + touch(w.wk, kv * dim) + touch(w.wv, kv * dim) +
                   touch(w.wo, dim * dim) + touch(w.rms_ffn, dim) + touch(w.w1, hidden * dim) +
                   touch(w.w2, dim * hidden) + touch(w.w3, hidden * dim);
        }

        // The CPU reference allocates its KV cache for the whole context up front, and a v1 header's
        // seq_len is not tied to the file size: run it only where that allocation is small.
        if (model.kv_cache_bytes + model.reference_activation_bytes <= (std::uint64_t{64} << 20)) {
            llamacl::ReferenceForward forward(ck);
            llamacl::Sampler greedy(c.vocab_size, 0.0f, 0.9f, 1);
            llamacl::Sampler topp(c.vocab_size, 1.0f, 0.9f, 7);
            int token = 1 % c.vocab_size;
            for (int pos = 0; pos < c.seq_len && pos < 3; ++pos) {
                std::span<float> logits = forward.forward(token, pos);
                if (logits.size() != vocab) fail("wrong logits size");
                std::vector<float> copy(logits.begin(), logits.end());
                const int a = greedy.sample(logits);
                const int b = topp.sample(copy);
                if (a < 0 || a >= c.vocab_size || b < 0 || b >= c.vocab_size) fail("sampled a token outside the vocabulary");
                token = b;
            }
        }
    } catch (const llamacl::Error& e) {
        if (std::strncmp(e.what(), "fuzz.bin: ", 10) != 0) fail("an error message that does not name the file");
        if (std::strchr(e.what(), '\n') != nullptr) fail("an error message of more than one line");
    }
    return 0;
}
