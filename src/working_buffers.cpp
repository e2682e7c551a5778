#include "llamacl/working_buffers.hpp"

#include <vector>

namespace llamacl {

namespace {
std::size_t floats(std::size_t n) { return n * sizeof(float); }
}  // namespace

WorkingBuffers::WorkingBuffers(const Device& d, const Config& c, int attention_chunks, int argmax_groups,
                               bool scores_in_memory)
    : x(d.allocate(floats(c.dim), "residual stream")),
      xn(d.allocate(floats(c.dim), "normalized activations")),
      q(d.allocate(floats(c.dim), "query")),
      xb(d.allocate(floats(c.dim), "attention output")),
      hb(d.allocate(floats(c.hidden_dim), "FFN activations")),
      att(d.allocate(floats(scores_in_memory ? static_cast<std::size_t>(c.n_heads) * c.seq_len : 1),
                     "attention scores")),
      att_partial(d.allocate(floats(static_cast<std::size_t>(c.n_heads) * attention_chunks * (c.head_size() + 2)),
                             "attention partial results")),
      att_arrivals(d.allocate(static_cast<std::size_t>(c.n_heads) * sizeof(cl_uint), "attention chunk counts")),
      logits(d.allocate(floats(c.vocab_size + 1), "logits")),
      tokens(d.allocate((static_cast<std::size_t>(c.seq_len) + 1) * sizeof(cl_int), "token sequence")),
      argmax_partial(d.allocate(static_cast<std::size_t>(argmax_groups) * sizeof(cl_int), "argmax partial results")) {
    const std::vector<cl_uint> zero(static_cast<std::size_t>(c.n_heads), 0);
    d.queue().enqueueWriteBuffer(att_arrivals, CL_TRUE, 0, zero.size() * sizeof(cl_uint), zero.data());
}

}  // namespace llamacl
