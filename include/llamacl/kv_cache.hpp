#pragma once
// The device-resident KV cache: keys and values of every layer for every position, allocated once per
// session. Position pos of layer l is written by that layer's attn_qkv_rope kernel at token pos and
// read by every later token's attention; it never crosses to the host.
#include <vector>

#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"

namespace llamacl {

class KvCache {
public:
    KvCache(const Device& device, const Config& config);
    // (seq_len, kv_dim) for one layer: one buffer per layer and kind keeps each allocation small.
    const cl::Buffer& keys(int layer) const { return keys_[layer]; }
    const cl::Buffer& values(int layer) const { return values_[layer]; }

private:
    std::vector<cl::Buffer> keys_, values_;
};

}  // namespace llamacl
