#include "llamacl/reference.hpp"

#include <algorithm>
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
// context the machine cannot hold before allocating (and zero-filling) it, naming the file.
Config checked_for_host_memory(const Checkpoint& ck, int positions) {
    const Config c = within_positions(ck.config(), positions);
    const ModelSize size(c);
    if (const std::uint64_t memory = host_memory_bytes(); memory > 0) {
        const std::uint64_t needed = size.kv_cache_bytes + size.reference_activation_bytes;
        if (needed > memory)
            throw Error(ck.path() + ": the CPU reference needs " + std::to_string(needed) +
                        " bytes for its KV cache and activations (" + std::to_string(c.seq_len) +
                        " positions) but this machine has " + std::to_string(memory) +
                        " bytes of memory; use a machine with more, or an OpenCL device without --compare-cpu");
    }
    return c;
}

}  // namespace

ReferenceForward::ReferenceForward(const Checkpoint& checkpoint, int positions)
    : ck_(checkpoint),
      c_(checked_for_host_memory(checkpoint, positions)),
      x_(c_.dim),
      xb_(c_.dim),
      xb2_(c_.dim),
      hb_(c_.hidden_dim),
      hb2_(c_.hidden_dim),
      q_(c_.dim),
      att_(static_cast<std::size_t>(c_.n_heads) * c_.seq_len),
      logits_(c_.vocab_size),
      xin_(c_.weight_format, c_.dim),
      hin_(c_.weight_format, c_.hidden_dim),
      key_cache_(static_cast<std::size_t>(c_.n_layers) * c_.seq_len * c_.kv_dim()),
      value_cache_(key_cache_.size()) {}

std::span<float> ReferenceForward::forward(int token, int pos) { return forward(token, pos, {}); }

std::span<float> ReferenceForward::forward(int token, int pos, const BoundaryObserver& observer) {
    const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden_dim = c_.hidden_dim, head_size = c_.head_size();
    float* x = x_.data();
    const auto report = [&](int layer, Op op, const float* values, int n) {
        if (observer) observer(layer, op, std::span<const float>(values, static_cast<std::size_t>(n)));
    };

    std::memcpy(x, ck_.token_embedding() + static_cast<std::size_t>(token) * dim, dim * sizeof(float));

    for (int l = 0; l < c_.n_layers; l++) {
        const LayerWeights w = ck_.layer(l);

        // attention rmsnorm, then q, k, v; k and v are written straight into this position's cache row
        rmsnorm(xb_.data(), x, w.rms_att.f32(), dim);
        report(l, Op::attn_norm, xb_.data(), dim);
        float* k = key_row(l, pos);
        float* v = value_row(l, pos);
        xin_.set(xb_.data());
        matmuls(xin_, {{q_.data(), w.wq, dim}, {k, w.wk, kv_dim}, {v, w.wv, kv_dim}});
        rope(q_.data(), k, pos, dim, kv_dim, head_size);
        report(l, Op::q, q_.data(), dim);
        report(l, Op::k, k, kv_dim);
        report(l, Op::v, v, kv_dim);

        attention(l, pos, q_.data(), xb_.data());
        report(l, Op::attention, xb_.data(), dim);

        // output projection and residual
        xin_.set(xb_.data());
        matmul(xb2_.data(), xin_, w.wo, dim);
        for (int i = 0; i < dim; i++) x[i] += xb2_[i];
        report(l, Op::attn_residual, x, dim);

        // FFN: w2(silu(w1(x)) * w3(x)) with its own rmsnorm, then residual
        rmsnorm(xb_.data(), x, w.rms_ffn.f32(), dim);
        report(l, Op::ffn_norm, xb_.data(), dim);
        xin_.set(xb_.data());
        matmuls(xin_, {{hb_.data(), w.w1, hidden_dim}, {hb2_.data(), w.w3, hidden_dim}});
        swiglu(hb_.data(), hb2_.data(), hidden_dim);
        report(l, Op::ffn_hidden, hb_.data(), hidden_dim);
        hin_.set(hb_.data());
        matmul(xb_.data(), hin_, w.w2, dim);
        for (int i = 0; i < dim; i++) x[i] += xb_[i];
        report(l, Op::ffn_residual, x, dim);
    }
    classify(ck_, x, xb2_.data(), logits_.data());
    report(-1, Op::final_norm, xb2_.data(), dim);
    report(-1, Op::logits, logits_.data(), c_.vocab_size);
    return logits_;
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
    const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden_dim = c_.hidden_dim;
    const std::size_t d = static_cast<std::size_t>(dim), h = static_cast<std::size_t>(hidden_dim);  // row widths
    Batch& b = batch_;
    if (b.xin.empty()) {
        for (std::vector<float>* v : {&b.x, &b.xb, &b.xb2, &b.q}) v->resize(kBatch * d);
        for (std::vector<float>* v : {&b.hb, &b.hb2}) v->resize(kBatch * h);
        b.xin.assign(kBatch, MatmulInput(c_.weight_format, dim));
        b.hin.assign(kBatch, MatmulInput(c_.weight_format, hidden_dim));
    }
    for (std::size_t done = 0; done < tokens.size(); done += kBatch) {
        const int n = static_cast<int>(std::min<std::size_t>(kBatch, tokens.size() - done));
        const int pos0 = first + static_cast<int>(done);
        const std::span<const MatmulInput> xin(b.xin.data(), static_cast<std::size_t>(n)),
            hin(b.hin.data(), static_cast<std::size_t>(n));
        for (int i = 0; i < n; i++)
            std::memcpy(&b.x[i * d], ck_.token_embedding() + static_cast<std::size_t>(tokens[done + i]) * d,
                        d * sizeof(float));
        // forward()'s steps, each for every position of the batch before the next: the batch's keys and
        // values are in the cache before any of its positions attends (each only to those before it).
        for (int l = 0; l < c_.n_layers; l++) {
            const LayerWeights w = ck_.layer(l);
            for (int i = 0; i < n; i++) {
                rmsnorm(&b.xb[i * d], &b.x[i * d], w.rms_att.f32(), dim);
                b.xin[i].set(&b.xb[i * d]);
            }
            matmuls(xin, {{b.q.data(), w.wq, dim, d},
                          {key_row(l, pos0), w.wk, kv_dim, static_cast<std::size_t>(kv_dim)},
                          {value_row(l, pos0), w.wv, kv_dim, static_cast<std::size_t>(kv_dim)}});
            for (int i = 0; i < n; i++) rope(&b.q[i * d], key_row(l, pos0 + i), pos0 + i, dim, kv_dim, c_.head_size());
            for (int i = 0; i < n; i++) {
                attention(l, pos0 + i, &b.q[i * d], &b.xb[i * d]);
                b.xin[i].set(&b.xb[i * d]);
            }
            matmuls(xin, {{b.xb2.data(), w.wo, dim, d}});
            for (int i = 0; i < n; i++) {
                for (std::size_t j = 0; j < d; j++) b.x[i * d + j] += b.xb2[i * d + j];
                rmsnorm(&b.xb[i * d], &b.x[i * d], w.rms_ffn.f32(), dim);
                b.xin[i].set(&b.xb[i * d]);
            }
            matmuls(xin, {{b.hb.data(), w.w1, hidden_dim, h}, {b.hb2.data(), w.w3, hidden_dim, h}});
            for (int i = 0; i < n; i++) {
                swiglu(&b.hb[i * h], &b.hb2[i * h], hidden_dim);
                b.hin[i].set(&b.hb[i * h]);
            }
            matmuls(hin, {{b.xb.data(), w.w2, dim, d}});
            for (int i = 0; i < n; i++)
                for (std::size_t j = 0; j < d; j++) b.x[i * d + j] += b.xb[i * d + j];
        }
        // The logits of the positions asked for: the prompt's last, or with `each` every one, classify()'s
        // steps with the classifier read once for the batch.
        if (!each) {
            if (done + n == tokens.size()) classify(ck_, &b.x[(n - 1) * d], xb2_.data(), logits_.data());
            continue;
        }
        const std::size_t vocab = static_cast<std::size_t>(c_.vocab_size);
        b.logits.resize(kBatch * vocab);
        for (int i = 0; i < n; i++) {
            rmsnorm(&b.xb[i * d], &b.x[i * d], ck_.rms_final(), dim);
            b.xin[i].set(&b.xb[i * d]);
        }
        matmuls(xin, {{b.logits.data(), ck_.classifier(), c_.vocab_size, vocab}});
        for (int i = 0; i < n; i++) each(pos0 + i, std::span<float>(&b.logits[i * vocab], vocab));
        std::copy_n(&b.logits[(n - 1) * vocab], vocab, logits_.begin());
    }
    return logits_;
}

std::span<const float> ReferenceForward::cache_rows(int layer, Op op, int first, int count) const {
    const std::vector<float>& cache = op == Op::k ? key_cache_ : value_cache_;
    const std::size_t kv_dim = static_cast<std::size_t>(c_.kv_dim());
    return std::span<const float>(cache).subspan((static_cast<std::size_t>(layer) * c_.seq_len + first) * kv_dim,
                                                 count * kv_dim);
}

}  // namespace llamacl
