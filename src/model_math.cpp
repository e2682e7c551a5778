#include "llamacl/model_math.hpp"

#include <cmath>
#include <cstddef>

namespace llamacl {

void rmsnorm(float* out, const float* x, const float* weight, int size) {
    float ss = 0.0f;
    for (int j = 0; j < size; j++) ss += x[j] * x[j];
    ss /= static_cast<float>(size);
    ss += 1e-5f;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < size; j++) out[j] = weight[j] * (ss * x[j]);
}

void matmul(float* out, const float* x, const float* w, int n, int d) {
    for (int i = 0; i < d; i++) {
        const float* row = w + static_cast<std::size_t>(i) * n;
        float val = 0.0f;
        for (int j = 0; j < n; j++) val += row[j] * x[j];
        out[i] = val;
    }
}

void rope(float* q, float* k, int pos, int dim, int kv_dim, int head_size) {
    // Rotate each (even, odd) pair by pos * 10000^(-head_dim/head_size); keys exist for i < kv_dim only.
    for (int i = 0; i < dim; i += 2) {
        const int head_dim = i % head_size;
        const float freq = 1.0f / powf(10000.0f, static_cast<float>(head_dim) / static_cast<float>(head_size));
        const float val = static_cast<float>(pos) * freq;
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

std::vector<float> rope_table(int seq_len, int head_size) {
    std::vector<float> table(static_cast<std::size_t>(seq_len) * head_size);
    for (int pos = 0; pos < seq_len; ++pos) {
        for (int i = 0; i < head_size; i += 2) {
            const float freq = 1.0f / powf(10000.0f, static_cast<float>(i) / static_cast<float>(head_size));
            const float val = static_cast<float>(pos) * freq;
            table[static_cast<std::size_t>(pos) * head_size + i] = cosf(val);
            table[static_cast<std::size_t>(pos) * head_size + i + 1] = sinf(val);
        }
    }
    return table;
}

void swiglu(float* hb, const float* hb2, int hidden_dim) {
    for (int i = 0; i < hidden_dim; i++) {
        float val = hb[i];
        val *= (1.0f / (1.0f + expf(-val)));  // silu(x) = x * sigmoid(x)
        val *= hb2[i];
        hb[i] = val;
    }
}

void classify(const Checkpoint& ck, const float* hidden, float* normed, float* logits) {
    const Config& c = ck.config();
    // run.c normalizes x in place; normalizing into a separate buffer computes the same values.
    rmsnorm(normed, hidden, ck.rms_final(), c.dim);
    matmul(logits, normed, ck.classifier(), c.dim, c.vocab_size);
}

}  // namespace llamacl
