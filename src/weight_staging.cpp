#include "llamacl/weight_staging.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include "llamacl/capacity_plan.hpp"
#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/model_math.hpp"
#include "llamacl/progress.hpp"

namespace llamacl {

namespace {

std::size_t norm_elements(const Config& c) { return static_cast<std::size_t>(c.dim); }
std::size_t attn_elements(const Config& c) { return static_cast<std::size_t>(c.dim) * c.dim; }
std::size_t kv_elements(const Config& c) { return static_cast<std::size_t>(c.kv_dim()) * c.dim; }
std::size_t ffn_elements(const Config& c) { return static_cast<std::size_t>(c.hidden_dim) * c.dim; }

std::size_t dim_row(const Config& c) { return static_cast<std::size_t>(c.dim); }
std::size_t hidden_row(const Config& c) { return static_cast<std::size_t>(c.hidden_dim); }

struct TensorView {
    cl::Buffer LayerBuffers::*buffer;
    WeightTensor LayerWeights::*host;
    std::size_t (*elements)(const Config&);
    std::size_t (*row)(const Config&);  // elements per row
    const char* name;
};

// A tensor of n weights on the device, in elements of the type its kernels read: floats, halves, or for
// the quantized formats the bytes of its rows' values and scales (DeviceWeightLayout).
struct DeviceLayout {
    std::size_t elements, element_bytes;
    std::size_t bytes() const { return elements * element_bytes; }
};
DeviceLayout device_layout(const WeightFormat& format, std::size_t n) {
    if (format.quantized()) return {static_cast<std::size_t>(format.bytes(n)), 1};
    return {n, static_cast<std::size_t>(format.bytes(1))};
}

// The tensors of a layer, in the order they are staged.
constexpr TensorView kLayerTensors[] = {
    {&LayerBuffers::rms_att, &LayerWeights::rms_att, norm_elements, dim_row, "rms_att"},
    {&LayerBuffers::wq, &LayerWeights::wq, attn_elements, dim_row, "wq"},
    {&LayerBuffers::wk, &LayerWeights::wk, kv_elements, dim_row, "wk"},
    {&LayerBuffers::wv, &LayerWeights::wv, kv_elements, dim_row, "wv"},
    {&LayerBuffers::wo, &LayerWeights::wo, attn_elements, dim_row, "wo"},
    {&LayerBuffers::rms_ffn, &LayerWeights::rms_ffn, norm_elements, dim_row, "rms_ffn"},
    {&LayerBuffers::w1, &LayerWeights::w1, ffn_elements, dim_row, "w1"},
    {&LayerBuffers::w2, &LayerWeights::w2, ffn_elements, hidden_row, "w2"},
    {&LayerBuffers::w3, &LayerWeights::w3, ffn_elements, dim_row, "w3"},
};

// Every layer's tensor `t` is laid out alike: the first one's format says how.
DeviceLayout layout(const Checkpoint& ck, const TensorView& t) {
    return device_layout((ck.layer(0).*t.host).format, t.elements(ck.config()));
}

// Writes `rows` rows of n weights of `w` in the device layout at `dst` with every core: one thread's
// memcpy from the page cache is slower than the pinned host-to-device link, so a single-threaded copy
// would bound streaming.
void parallel_write(std::byte* dst, const DeviceWeightLayout& layout, const WeightTensor& w, std::uint64_t rows,
                    std::uint64_t n) {
    const DeviceWeightLayout as{w.format, layout.interleave, layout.word};  // (the norms are floats whatever the matrices are)
    const std::uint64_t row_bytes = w.format.bytes(n);
    constexpr std::uint64_t kMinSlice = 8u << 20;
    const std::uint64_t threads = std::clamp<std::uint64_t>(rows * row_bytes / kMinSlice, 1,
                                                            std::max(1u, std::thread::hardware_concurrency()));
    if (threads == 1) {
        as.write_rows(dst, w, 0, rows, n);
        return;
    }
    const std::uint64_t slice = (rows + threads - 1) / threads;
    std::vector<std::thread> workers;
    for (std::uint64_t begin = 0; begin < rows; begin += slice) {
        const std::uint64_t end = std::min(rows, begin + slice);
        workers.emplace_back([=, &w] { as.write_rows(dst + begin * row_bytes, w, begin, end - begin, n); });
    }
    for (std::thread& worker : workers) worker.join();
}

// The host bytes a device copy of `rows` rows of n weights of `w` is made from: the mapped file's where
// the layouts agree (f32, f16), else Q8_0's and Q4_0's rows written in the device layout into `packed`,
// which must outlive the copy.
const void* device_bytes(const DeviceWeightLayout& layout, const WeightTensor& w, std::uint64_t rows, std::uint64_t n,
                         std::vector<std::byte>& packed) {
    if (!w.format.quantized()) return w.values;
    packed.resize(w.format.bytes(rows * n));
    parallel_write(packed.data(), layout, w, rows, n);
    return packed.data();
}

// Writes layer tensor t, `source` in the mapped file, at `host` in the device layout.
void write_tensor(std::byte* host, const DeviceWeightLayout& layout, const Config& c, const TensorView& t,
                  const WeightTensor& source) {
    parallel_write(host, layout, source, t.elements(c) / t.row(c), t.row(c));
}

cl::Buffer upload_once(const Device& device, const void* data, std::size_t bytes, const std::string& what) {
    cl::Buffer buffer = device.allocate(bytes, what, CL_MEM_READ_ONLY);
    device.queue().enqueueWriteBuffer(buffer, CL_TRUE, 0, bytes, data);
    return buffer;
}

// The weights at `data`, which outlive the session: read where they lie (in_place), else uploaded once.
cl::Buffer constant(const Device& device, const void* data, std::size_t bytes, const std::string& what, bool in_place) {
    return in_place ? device.wrap(data, bytes, what) : upload_once(device, data, bytes, what);
}

}  // namespace

WeightStaging::WeightStaging(const Device& device, const Checkpoint& ck, const DeviceWeightLayout& weight_layout,
                             const DeviceWeightLayout& classifier_layout, const CapacityPlan& plan, Finalize finalize,
                             bool host_mirror, bool stacked, RuntimeCounters& counters)
    : device_(device),
      ck_(ck),
      layout_(weight_layout),
      plan_(plan),
      counters_(counters),
      rope_(device, plan.positions, static_cast<std::size_t>(ck.config().head_size()) * sizeof(float),
            [rope = Rope::of(ck.config())](int first, int count, std::byte* out) {
                rope_rows(reinterpret_cast<float*>(out), first, count, rope);
            },
            "RoPE table") {
    const Config& c = ck.config();
    // A CPU device reads the resident weights, the final norm and the classifier where they lie (the
    // mapped file, or the converted checkpoint) wherever its kernels' layout is the host's: float formats,
    // whose stacks for the token kernel are the file's own runs of a tensor's layers.
    const bool in_place = device.info().is_cpu;
    const auto readable_in_place = [&](const WeightTensor& w) { return in_place && !w.format.quantized(); };
    slots_.resize(plan.layers_per_offload);
    if (plan.resident()) {
        // Every layer has its own slot, parts of its tensors' stacks (which the token kernel takes whole),
        // filled when first acquired. Upload straight from the mapped file (Q8_0, Q4_0: its rows rewritten, one
        // tensor at a time), once, before any token.
        std::optional<ProgressLine> progress;
        if (!readable_in_place(ck.layer(0).wq))
            progress.emplace("uploading " + std::to_string(plan.layer_bytes * c.n_layers >> 20) +
                             " MiB of layer weights to " + device.info().name);
        std::vector<std::byte> packed;
        for (const TensorView& t : kLayerTensors) {
            const DeviceLayout on_device = layout(ck, t);
            std::vector<const std::byte*> parts;
            for (int l = 0; l < c.n_layers; ++l)
                parts.push_back(static_cast<const std::byte*>((ck.layer(l).*t.host).values));
            const bool wrappable = !stacked || LayerStack::contiguous(parts, on_device.bytes());
            if (readable_in_place(ck.layer(0).*t.host) && wrappable) {
                stacks_.push_back(
                    LayerStack::wrap(device, parts, on_device.elements, on_device.element_bytes, stacked, t.name));
                continue;
            }
            stacks_.push_back(LayerStack::allocate(device, on_device.elements, c.n_layers, stacked, t.name,
                                                   CL_MEM_READ_ONLY, on_device.element_bytes));
            for (int l = 0; l < c.n_layers; ++l) {
                const std::size_t n = t.row(c);
                stacks_.back().write(device.queue(), l, device_bytes(layout_, ck.layer(l).*t.host, t.elements(c) / n, n, packed));
                if (!packed.empty()) device.queue().finish();  // before `packed` holds the next tensor
            }
        }
        device.queue().finish();
    } else {
        for (int s = 0; s < plan.layers_per_offload; ++s)
            for (const TensorView& t : kLayerTensors)
                slots_[s].*t.buffer = device.allocate(layout(ck, t).bytes(),
                                                      std::string(t.name) + " of weight slot " + std::to_string(s),
                                                      CL_MEM_READ_ONLY);
        if (host_mirror && plan.layer_bytes * c.n_layers <= available_host_memory_bytes() / 2) fill_mirror();
        if (mirror_.empty())
            pinned_ = std::make_unique<PinnedBuffer>(device, plan.layer_bytes * plan.layers_per_offload,
                                                     "pinned staging for " + std::to_string(plan.layers_per_offload) +
                                                         " layers");
    }

    if (finalize == Finalize::device) {
        rms_final_ = constant(device, ck.rms_final(), static_cast<std::size_t>(c.dim) * sizeof(float),
                              "final RMSNorm weights", in_place);
        // The classifier can be the largest matrix (vocab x dim); split it into blocks of rows that each
        // fit one allocation.
        const WeightTensor& classifier = ck.classifier();
        const std::size_t row_bytes = device_layout(classifier.format, static_cast<std::size_t>(c.dim)).bytes();
        const int rows_per_block = static_cast<int>(std::min<std::uint64_t>(
            static_cast<std::uint64_t>(c.vocab_size), device.info().max_alloc_bytes / row_bytes));
        std::vector<std::byte> packed;
        for (int first = 0; first < c.vocab_size; first += rows_per_block) {
            const int rows = std::min(rows_per_block, c.vocab_size - first);
            const void* bytes = device_bytes(classifier_layout, classifier.from(static_cast<std::uint64_t>(first) * c.dim),
                                             static_cast<std::uint64_t>(rows), static_cast<std::uint64_t>(c.dim), packed);
            classifier_.push_back({constant(device, bytes, static_cast<std::size_t>(rows) * row_bytes, "classifier",
                                            readable_in_place(classifier)),
                                   first, rows});
        }
    }
}

void WeightStaging::fill_mirror() {
    try {
        for (int chunk = 0; chunk < plan_.chunks(); ++chunk) {
            const auto [first, last] = chunk_layers(chunk);
            mirror_.push_back(std::make_unique<PinnedBuffer>(
                device_, plan_.layer_bytes * (last - first),
                "pinned mirror of layers " + std::to_string(first) + ".." + std::to_string(last - 1)));
            for_each_tensor(chunk, static_cast<std::byte*>(mirror_.back()->data()),
                            [&](int, const TensorView& t, const WeightTensor& source, std::byte* host, std::size_t) {
                                write_tensor(host, layout_, ck_.config(), t, source);
                            });
        }
    } catch (const Error&) {
        mirror_.clear();  // the driver refused the pinned memory after all: stream through one buffer
    }
}

std::pair<int, int> WeightStaging::chunk_layers(int chunk) const {
    const int first = chunk * plan_.layers_per_offload;
    return {first, std::min(first + plan_.layers_per_offload, ck_.config().n_layers)};
}

// Calls f(slot, tensor, its weights in the mapped file, place in `host`, bytes) for every tensor of the chunk,
// laying them out in `host` back to back in staging order: the layout of the pinned memory.
template <typename F>
void WeightStaging::for_each_tensor(int chunk, std::byte* host, F f) const {
    const auto [first, last] = chunk_layers(chunk);
    for (int l = first; l < last; ++l) {
        const LayerWeights w = ck_.layer(l);
        for (const TensorView& t : kLayerTensors) {
            const std::size_t bytes = layout(ck_, t).bytes();
            f(l - first, t, w.*t.host, host, bytes);
            host += bytes;
        }
    }
}

const LayerStack* WeightStaging::stack(cl::Buffer LayerBuffers::*tensor) const {
    for (std::size_t i = 0; i < stacks_.size(); ++i)
        if (kLayerTensors[i].buffer == tensor) return &stacks_[i];
    return nullptr;
}

const LayerBuffers& WeightStaging::acquire(int layer) {
    if (plan_.resident()) {
        LayerBuffers& slot = slots_[layer];
        if (slot.wq() == nullptr)
            for (std::size_t i = 0; i < stacks_.size(); ++i) slot.*kLayerTensors[i].buffer = stacks_[i].layer(layer);
        return slot;
    }
    const int chunk = layer / plan_.layers_per_offload;
    if (chunk != staged_chunk_) upload_chunk(chunk);
    return slots_[layer % plan_.layers_per_offload];
}

void WeightStaging::upload_chunk(int chunk) {
    // Without a mirror the host is about to refill the pinned memory: wait until the device has copied
    // the last chunk out of it. (The device-side slots need no wait: the in-order queue runs this
    // chunk's copies only after every kernel that read the previous chunk.)
    const bool mirrored = this->mirrored();
    if (!mirrored && pinned_in_use_() != nullptr) {
        pinned_in_use_.wait();
        counters_.host_waits++;
    }
    auto* host = static_cast<std::byte*>(mirrored ? mirror_[chunk]->data() : pinned_->data());
    for_each_tensor(chunk, host, [&](int slot, const TensorView& t, const WeightTensor& source, std::byte* at,
                                     std::size_t bytes) {
        if (!mirrored) write_tensor(at, layout_, ck_.config(), t, source);
        cl::Event done;
        device_.queue().enqueueWriteBuffer(slots_[slot].*t.buffer, CL_FALSE, 0, bytes, at, nullptr,
                                           mirrored ? nullptr : &done);
        counters_.enqueues++;
        counters_.weight_bytes_uploaded += bytes;
        if (!mirrored) pinned_in_use_ = done;
    });
    staged_chunk_ = chunk;
}

}  // namespace llamacl
