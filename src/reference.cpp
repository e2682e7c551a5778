#include "llamacl/reference.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/row_shares.hpp"
#include "llamacl/sampler.hpp"  // softmax(), shared with sampling exactly as in run.c

namespace llamacl {

namespace {

// The positions the run reaches size the KV cache, and a v1 file's size does not bound seq_len: refuse a
// context the machine cannot hold before allocating (and zero-filling) it, naming the file. The
// activations counted are a prompt batch's with every position's logits, the most any caller grows.
Config checked_for_host_memory(const Checkpoint& ck, int positions) {
    const Config c = within_positions(ck.config(), positions);
    const ModelSize size(c);
    if (const std::uint64_t memory = host_memory_bytes(); memory > 0) {
        const std::uint64_t needed =
            size.kv_cache_bytes + size.reference_activation_bytes + ReferenceForward::batch_bytes(c, true);
        if (needed > memory)
            throw Error(ck.path() + ": the CPU reference needs " + std::to_string(needed) +
                        " bytes for its KV cache and activations (" + std::to_string(c.seq_len) +
                        " positions) but this machine has " + std::to_string(memory) +
                        " bytes of memory; use a machine with more, or an OpenCL device without --compare-cpu");
    }
    return c;
}

// Every matrix a position reads: each layer's tensors but its two norms, and the classifier.
std::uint64_t matrix_floats(const Config& c) {
    const ModelSize size(c);
    return c.n_layers * (size.layer_params - 2 * static_cast<std::uint64_t>(c.dim)) + size.embedding_params;
}

// A layer's matrices that matmul reads, (rows, columns) each.
struct LayerMatrix {
    WeightTensor LayerWeights::*tensor;
    int rows, cols;
};
std::array<LayerMatrix, 7> layer_matrices(const Config& c) {
    const int dim = c.dim, kv_dim = c.kv_dim(), hidden_dim = c.hidden_dim;
    return {{{&LayerWeights::wq, dim, dim},
             {&LayerWeights::wk, kv_dim, dim},
             {&LayerWeights::wv, kv_dim, dim},
             {&LayerWeights::wo, dim, dim},
             {&LayerWeights::w1, hidden_dim, dim},
             {&LayerWeights::w2, dim, hidden_dim},
             {&LayerWeights::w3, hidden_dim, dim}}};
}

}  // namespace

ReferenceForward::ReferenceForward(const Checkpoint& checkpoint, int positions)
    : ck_(checkpoint),
      c_(checked_for_host_memory(checkpoint, positions)),
      att_(static_cast<std::size_t>(c_.n_heads) * c_.seq_len),
      logits_(c_.vocab_size),
      key_cache_(static_cast<std::size_t>(c_.n_layers) * c_.seq_len * c_.kv_dim()),
      value_cache_(key_cache_.size()),
      classifier_(checkpoint.classifier()) {
    const std::uint64_t laid_out = laid_out_bytes(c_), memory = host_memory_bytes();
    if (laid_out > 0 && c_.seq_len >= kLayOutPositions && (memory == 0 || laid_out <= memory / 8)) lay_out_matrices();
    hold(1);
}

// Laying an f32 model's matrices out for the row blocks reads and writes each once; the laid-out blocks
// then read faster, which repays the copy within kLayOutPositions positions (docs/benchmarks.md). The copy
// is made beside the mapped file, so it is kept to small models.
std::uint64_t ReferenceForward::laid_out_bytes(const Config& c) {
    const std::uint64_t bytes = matrix_floats(c) * sizeof(float);
    const bool f32 = c.weight_format.type == ElementType::f32 && c.classifier_format().type == ElementType::f32;
    return f32 && bytes <= kLayOutBytes ? bytes : 0;
}

// Each matrix's blocks for every layer in turn, so that a layer's lie at a fixed stride (layer()).
void ReferenceForward::lay_out_matrices() {
    row_blocks_.reset(new float[matrix_floats(c_)]);  // (the blocks read only what lay_out_row_blocks wrote)
    float* next = row_blocks_.get();
    const auto lay_out = [&](const WeightTensor& t, int d, int n) {
        const std::uint64_t work = static_cast<std::uint64_t>(d) * n;
        for_row_shares(d, kRowBlockRows, work,
                       [&](int first, int last) { lay_out_row_blocks(next, t.f32(), n, first, last); });
        next += work;
    };
    for (const LayerMatrix& m : layer_matrices(c_))
        for (int l = 0; l < c_.n_layers; l++) lay_out(ck_.layer(l).*m.tensor, m.rows, m.cols);
    classifier_.row_blocks = next;
    lay_out(classifier_, c_.vocab_size, c_.dim);
}

LayerWeights ReferenceForward::layer(int l) const {
    LayerWeights w = ck_.layer(l);
    if (!row_blocks_) return w;
    const float* blocks = row_blocks_.get();
    for (const LayerMatrix& m : layer_matrices(c_)) {
        const std::uint64_t floats = static_cast<std::uint64_t>(m.rows) * m.cols;
        (w.*m.tensor).row_blocks = blocks + l * floats;
        blocks += c_.n_layers * floats;
    }
    return w;
}

std::uint64_t ReferenceForward::batch_bytes(const Config& c, bool every_logit) {
    const std::uint64_t more = kBatch - 1;
    const std::uint64_t rows = (4ull * c.dim + 2ull * c.hidden_dim) * sizeof(float);
    const WeightFormat& f = c.weight_format;
    const WeightFormat t = c.classifier_format();
    const std::uint64_t inputs = (f.quantized() ? f.input().bytes(c.dim) + f.input().bytes(c.hidden_dim) : 0) +
                                 (t.quantized() ? t.input().bytes(c.dim) : 0);
    return more * (rows + inputs) + (every_logit ? kBatch * static_cast<std::uint64_t>(c.vocab_size) * sizeof(float) : 0);
}

void ReferenceForward::hold(int positions) {
    Activations& a = act_;
    if (a.positions >= positions) return;
    const std::size_t n = static_cast<std::size_t>(positions);
    for (std::vector<float>* v : {&a.x, &a.xb, &a.xb2, &a.q}) v->resize(n * c_.dim);
    for (std::vector<float>* v : {&a.hb, &a.hb2}) v->resize(n * c_.hidden_dim);
    a.xin.resize(n, MatmulInput(c_.weight_format, c_.dim));
    a.hin.resize(n, MatmulInput(c_.weight_format, c_.hidden_dim));
    a.cin.resize(n, MatmulInput(c_.classifier_format(), c_.dim));
    a.positions = positions;
}

std::span<float> ReferenceForward::forward(int token, int pos) { return forward(token, pos, {}); }

std::span<float> ReferenceForward::forward(int token, int pos, const BoundaryObserver& observer) {
    run_layers(std::span<const int>(&token, 1), pos, observer);
    classify(ck_.config(), ck_.rms_final(), classifier_, act_.x.data(), act_.xb2.data(), logits_.data());
    if (observer) {
        observer(-1, Op::final_norm, std::span<const float>(act_.xb2.data(), static_cast<std::size_t>(c_.dim)));
        observer(-1, Op::logits, logits_);
    }
    return logits_;
}

void ReferenceForward::run_layers(std::span<const int> tokens, int pos, const BoundaryObserver& observer) {
    const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden_dim = c_.hidden_dim, n = static_cast<int>(tokens.size());
    const std::size_t d = static_cast<std::size_t>(dim), h = static_cast<std::size_t>(hidden_dim);  // row widths
    Activations& a = act_;
    const std::span<const MatmulInput> xin(a.xin.data(), tokens.size()), hin(a.hin.data(), tokens.size());
    const auto report = [&](int layer, Op op, const float* values, int count) {
        if (observer) observer(layer, op, std::span<const float>(values, static_cast<std::size_t>(count)));
    };
    for (int i = 0; i < n; i++)
        std::memcpy(&a.x[i * d], ck_.token_embedding() + static_cast<std::size_t>(tokens[i]) * d, d * sizeof(float));

    for (int l = 0; l < c_.n_layers; l++) {
        const LayerWeights w = layer(l);

        // attention rmsnorm, then q, k, v; k and v are written straight into the positions' cache rows
        for (int i = 0; i < n; i++) {
            rmsnorm(&a.xb[i * d], &a.x[i * d], w.rms_att.f32(), dim, c_.norm_eps);
            a.xin[i].set(&a.xb[i * d]);
        }
        report(l, Op::attn_norm, a.xb.data(), dim);
        matmuls(xin, {{a.q.data(), w.wq, dim, d},
                      {key_row(l, pos), w.wk, kv_dim, static_cast<std::size_t>(kv_dim)},
                      {value_row(l, pos), w.wv, kv_dim, static_cast<std::size_t>(kv_dim)}});
        for (int i = 0; i < n; i++) rope(&a.q[i * d], key_row(l, pos + i), pos + i, dim, kv_dim, Rope::of(c_));
        report(l, Op::q, a.q.data(), dim);
        report(l, Op::k, key_row(l, pos), kv_dim);
        report(l, Op::v, value_row(l, pos), kv_dim);

        for (int i = 0; i < n; i++) {
            attention(l, pos + i, &a.q[i * d], &a.xb[i * d]);
            a.xin[i].set(&a.xb[i * d]);
        }
        report(l, Op::attention, a.xb.data(), dim);

        // output projection and residual
        matmuls(xin, {{a.xb2.data(), w.wo, dim, d}});
        for (std::size_t j = 0; j < n * d; j++) a.x[j] += a.xb2[j];
        report(l, Op::attn_residual, a.x.data(), dim);

        // FFN: w2(silu(w1(x)) * w3(x)) with its own rmsnorm, then residual
        for (int i = 0; i < n; i++) {
            rmsnorm(&a.xb[i * d], &a.x[i * d], w.rms_ffn.f32(), dim, c_.norm_eps);
            a.xin[i].set(&a.xb[i * d]);
        }
        report(l, Op::ffn_norm, a.xb.data(), dim);
        matmuls(xin, {{a.hb.data(), w.w1, hidden_dim, h}, {a.hb2.data(), w.w3, hidden_dim, h}});
        for (int i = 0; i < n; i++) {
            swiglu(&a.hb[i * h], &a.hb2[i * h], hidden_dim);
            a.hin[i].set(&a.hb[i * h]);
        }
        report(l, Op::ffn_hidden, a.hb.data(), hidden_dim);
        matmuls(hin, {{a.xb.data(), w.w2, dim, d}});
        for (std::size_t j = 0; j < n * d; j++) a.x[j] += a.xb[j];
        report(l, Op::ffn_residual, a.x.data(), dim);
    }
}

void ReferenceForward::attention(int l, int pos, const float* q_all, float* xb_all) {
    const int head_size = c_.head_size(), kv_mul = c_.kv_mul();
    const std::uint64_t work = static_cast<std::uint64_t>(c_.n_heads) * (pos + 1) * head_size * 2;
    for_row_shares(c_.n_heads, 1, work, [&](int first, int last) {
        for (int h = first; h < last; h++) {
            const float* q = q_all + h * head_size;
            float* att = att_.data() + static_cast<std::size_t>(h) * c_.seq_len;
            const std::size_t kv_off = static_cast<std::size_t>(h / kv_mul) * head_size;
            for (int t = 0; t <= pos; t++) {
                const float* kt = key_row(l, t) + kv_off;
                float score = 0.0f;
                for (int i = 0; i < head_size; i++) score += q[i] * kt[i];
                score /= sqrtf(static_cast<float>(head_size));
                att[t] = score;
            }
            softmax(std::span<float>(att, static_cast<std::size_t>(pos) + 1));
            float* xb = xb_all + h * head_size;
            std::memset(xb, 0, head_size * sizeof(float));
            for (int t = 0; t <= pos; t++) {
                const float* vt = value_row(l, t) + kv_off;
                const float a = att[t];
                for (int i = 0; i < head_size; i++) xb[i] += a * vt[i];
            }
        }
    });
}

std::span<float> ReferenceForward::prefill(std::span<const int> tokens, int first, const LogitsObserver& each) {
    if (tokens.empty() || first < 0 || first + tokens.size() > static_cast<std::size_t>(c_.seq_len))
        throw std::invalid_argument("prefill: positions outside the context, or no token");
    hold(static_cast<int>(std::min<std::size_t>(kBatch, tokens.size())));
    const std::size_t d = static_cast<std::size_t>(c_.dim), vocab = static_cast<std::size_t>(c_.vocab_size);
    Activations& a = act_;
    for (std::size_t done = 0; done < tokens.size(); done += kBatch) {
        const std::size_t n = std::min<std::size_t>(kBatch, tokens.size() - done);
        const int pos = first + static_cast<int>(done);
        run_layers(tokens.subspan(done, n), pos, {});
        // The logits of the positions asked for: the prompt's last, or with `each` every one, classify()'s
        // steps with the classifier read once for the batch.
        if (!each) {
            if (done + n == tokens.size())
                classify(ck_.config(), ck_.rms_final(), classifier_, &a.x[(n - 1) * d], a.xb2.data(), logits_.data());
            continue;
        }
        a.logits.resize(kBatch * vocab);
        for (std::size_t i = 0; i < n; i++) {
            rmsnorm(&a.xb[i * d], &a.x[i * d], ck_.rms_final(), c_.dim, c_.norm_eps);
            a.cin[i].set(&a.xb[i * d]);
        }
        matmuls(std::span<const MatmulInput>(a.cin.data(), n), {{a.logits.data(), classifier_, c_.vocab_size, vocab}});
        for (std::size_t i = 0; i < n; i++) each(pos + static_cast<int>(i), std::span<float>(&a.logits[i * vocab], vocab));
        std::copy_n(&a.logits[(n - 1) * vocab], vocab, logits_.begin());
    }
    return logits_;
}

std::span<const float> ReferenceForward::cache_rows(int layer, Op op, int first, int count) const {
    const ZeroedFloats& cache = op == Op::k ? key_cache_ : value_cache_;
    const std::size_t kv_dim = static_cast<std::size_t>(c_.kv_dim());
    return std::span<const float>(cache.data(), cache.size()).subspan((static_cast<std::size_t>(layer) * c_.seq_len + first) * kv_dim,
                                                 count * kv_dim);
}

}  // namespace llamacl
