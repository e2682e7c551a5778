#include "llamacl/kv_cache.hpp"

namespace llamacl {

namespace {
std::size_t layer_floats(const Config& c) { return static_cast<std::size_t>(c.seq_len) * c.kv_dim(); }
}  // namespace

KvCache::KvCache(const Device& device, const Config& c, bool stacked)
    : keys_(LayerStack::allocate(device, layer_floats(c), c.n_layers, stacked, "KV cache keys")),
      values_(LayerStack::allocate(device, layer_floats(c), c.n_layers, stacked, "KV cache values")) {}

}  // namespace llamacl
