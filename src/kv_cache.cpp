#include "llamacl/kv_cache.hpp"

namespace llamacl {

KvCache::KvCache(const Device& device, const Config& c, bool stacked)
    : keys_(LayerStack::allocate(device, static_cast<std::size_t>(c.seq_len) * c.kv_dim(), c.n_layers, stacked,
                                 "KV cache keys")),
      values_(LayerStack::allocate(device, static_cast<std::size_t>(c.seq_len) * c.kv_dim(), c.n_layers, stacked,
                                   "KV cache values")) {}

}  // namespace llamacl
