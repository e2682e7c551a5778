#include "llamacl/working_buffers.hpp"

#include <vector>

namespace llamacl {

namespace {
std::size_t floats(std::size_t n) { return n * sizeof(float); }
}  // namespace

WorkingBuffers::Sizes::Sizes(const Config& c, int attention_chunks, int argmax_groups, bool scores_in_memory)
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
      argmax_partial(static_cast<std::size_t>(argmax_groups) * sizeof(cl_int)) {}

std::uint64_t WorkingBuffers::Sizes::total() const {
    return std::uint64_t{x} + xn + q + xb + hb + att + att_partial + att_arrivals + logits + tokens + argmax_partial;
}

WorkingBuffers::WorkingBuffers(const Device& d, const Config& c, int attention_chunks, int argmax_groups,
                               bool scores_in_memory) {
    const Sizes s(c, attention_chunks, argmax_groups, scores_in_memory);
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
    const std::vector<cl_uint> zero(s.att_arrivals / sizeof(cl_uint), 0);
    d.queue().enqueueWriteBuffer(att_arrivals, CL_TRUE, 0, s.att_arrivals, zero.data());
}

}  // namespace llamacl
