#pragma once
// The device-resident KV cache: keys and values of every layer for every position, allocated once per
// session. Position pos of layer l is written by that layer's attn_qkv_rope step at token pos and
// read by every later token's attention; it never crosses to the host.
#include "llamacl/checkpoint.hpp"
#include "llamacl/device.hpp"
#include "llamacl/layer_stack.hpp"

namespace llamacl {

class KvCache {
public:
    // stacked: every layer's keys (and values) in one allocation, for the token kernel (layer_stack.hpp).
    KvCache(const Device& device, const Config& config, bool stacked);
    // (seq_len, kv_dim) for one layer.
    const cl::Buffer& keys(int layer) const { return keys_.layer(layer); }
    const cl::Buffer& values(int layer) const { return values_.layer(layer); }
    // Every layer's, for the token kernel.
    const LayerStack& all_keys() const { return keys_; }
    const LayerStack& all_values() const { return values_; }

private:
    LayerStack keys_, values_;
};

}  // namespace llamacl
