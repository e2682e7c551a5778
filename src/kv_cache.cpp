#include "llamacl/kv_cache.hpp"

#include <string>

namespace llamacl {

KvCache::KvCache(const Device& device, const Config& c) {
    const std::size_t bytes = static_cast<std::size_t>(c.seq_len) * c.kv_dim() * sizeof(float);
    for (int l = 0; l < c.n_layers; ++l) {
        keys_.push_back(device.allocate(bytes, "KV cache keys of layer " + std::to_string(l)));
        values_.push_back(device.allocate(bytes, "KV cache values of layer " + std::to_string(l)));
    }
}

}  // namespace llamacl
