#include "llamacl/working_buffers.hpp"

#include <algorithm>
#include <vector>

namespace llamacl {

namespace {
std::size_t floats(std::size_t n) { return n * sizeof(float); }
}  // namespace

WorkingBuffers::Sizes::Sizes(const Config& c, int attention_chunks, int argmax_groups, bool scores_in_memory,
                             bool prefill_scores_in_memory, int prefill_batch)
    : x(floats(c.dim)),
      xn(floats(c.dim)),
      q(floats(c.dim)),
      xb(floats(c.dim)),
      hb(floats(c.hidden_dim)),
      att(floats(scores_in_memory ? static_cast<std::size_t>(c.n_heads) * c.seq_len : 1)),
      att_partial(floats(static_cast<std::size_t>(c.n_heads) * attention_chunks * (c.head_size() + 2))),
      att_arrivals(static_cast<std::size_t>(c.n_heads) * sizeof(cl_uint)),
      logits(floats(static_cast<std::size_t>(c.vocab_size) + 1)),
      tokens((static_cast<std::size_t>(c.seq_len) + 1) * sizeof(cl_int)),
      argmax_partial(static_cast<std::size_t>(argmax_groups) * sizeof(cl_int)),
      batch_x(floats(static_cast<std::size_t>(prefill_batch) * c.dim)),
      batch_xn(batch_x),
      batch_q(batch_x),
      batch_xb(batch_x),
      batch_hb(floats(static_cast<std::size_t>(prefill_batch) * c.hidden_dim)),
      batch_att(floats(prefill_scores_in_memory ? static_cast<std::size_t>(prefill_batch) * c.n_heads * c.seq_len : 1)),
      batch_hb_up(c.weight_format.quantized() ? batch_hb : floats(1)),
      batch_xq(c.weight_format.quantized()
                   ? static_cast<std::size_t>(prefill_batch) *
                         c.weight_format.input().bytes(static_cast<std::uint64_t>(std::max(c.dim, c.hidden_dim)))
                   : floats(1)) {}

std::uint64_t WorkingBuffers::Sizes::total() const {
    return std::uint64_t{x} + xn + q + xb + hb + att + att_partial + att_arrivals + logits + tokens + argmax_partial +
           batch_x + batch_xn + batch_q + batch_xb + batch_hb + batch_hb_up + batch_att + batch_xq;
}

WorkingBuffers::WorkingBuffers(const Device& d, const Config& c, int attention_chunks, int argmax_groups,
                               bool scores_in_memory, bool prefill_scores_in_memory, int prefill_batch_)
    : prefill_batch(prefill_batch_) {
    const Sizes s(c, attention_chunks, argmax_groups, scores_in_memory, prefill_scores_in_memory, prefill_batch);
    x = d.allocate(s.x, "residual stream");
    xn = d.allocate(s.xn, "normalized activations");
    q = d.allocate(s.q, "query");
    xb = d.allocate(s.xb, "attention output");
    hb = d.allocate(s.hb, "FFN activations");
    att = d.allocate(s.att, "attention scores");
    att_partial = d.allocate(s.att_partial, "attention partial results");
    att_arrivals = d.allocate(s.att_arrivals, "attention chunk counts");
    logits = d.allocate(s.logits, "logits");
    tokens = d.allocate(s.tokens, "token sequence");
    argmax_partial = d.allocate(s.argmax_partial, "argmax partial results");
    batch_x = d.allocate(s.batch_x, "prefill residual streams");
    batch_xn = d.allocate(s.batch_xn, "prefill normalized activations");
    batch_q = d.allocate(s.batch_q, "prefill queries");
    batch_xb = d.allocate(s.batch_xb, "prefill attention outputs");
    batch_hb = d.allocate(s.batch_hb, "prefill FFN activations");
    batch_att = d.allocate(s.batch_att, "prefill attention scores");
    batch_hb_up = d.allocate(s.batch_hb_up, "prefill FFN up projections");
    batch_xq = d.allocate(s.batch_xq, "prefill quantized inputs");
    const std::vector<cl_uint> zero(s.att_arrivals / sizeof(cl_uint), 0);
    d.queue().enqueueWriteBuffer(att_arrivals, CL_TRUE, 0, s.att_arrivals, zero.data());
}

}  // namespace llamacl
