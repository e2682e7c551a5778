#include "llamacl/token_kernel.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <utility>
#include <vector>

#include "llamacl/error.hpp"
#include "llamacl/host_memory.hpp"
#include "llamacl/kernel_args.hpp"

namespace llamacl {

namespace {

// Polls of a grid barrier before the token kernel gives up: far beyond what a barrier takes when every
// work-group runs, short of a hang. A GPU's poll waits on its L2 cache (about a second of them); a CPU's
// on its own core's (about two seconds of them: a work-group a compute unit waits out a peer's step,
// however long, and its thread's preemption).
constexpr cl_uint kGpuSpinLimit = 1u << 20, kCpuSpinLimit = 0xFFFFFFFFu;

// The most work-groups per compute unit: on GPUs two hide more of each step's memory latency than one,
// where the register cap (register_cap_option) lets two run; CPU shapes run one work-item a compute unit.
constexpr int kGroupsPerComputeUnit = 2;

// Greedy decoding's partial results have a slot per work-group of the argmax launch (working_buffers.hpp).
static_assert(kGroupsPerComputeUnit <= kMinGroupsPerComputeUnit, "argmax_partial holds one int per work-group");

// Quantized weights on GPU shapes: w2's input is quantized once, behind one more grid barrier, where it
// is more than this many words (four values) a work-item (token.cl's QUANTIZE_W2_ONCE): a work-group
// staging a longer input itself waits longer than that barrier takes, a shorter one less.
constexpr int kQuantizeOnceWords = 4;
// wo's input is quantized by attention's work-groups (QUANTIZE_WO_INPUT) where it is at least this many
// words a work-item: a head's quantizing lengthens the attention step, whose few work-groups on a small
// model (12 heads) then cost more than the staging saves.
constexpr int kQuantizeWoWords = 2;

// Whether the kernels quantize a quantized format's input a word a work-item, a group's words in one
// warp: the condition of dot_quantized.cl's one-pass stage_input (WORD_SCALES), which token.cl's inputs
// quantized once take; token.cl refuses to build them without it.
bool quantizes_by_words(const KernelSet& kernels, int group_size) {
    return kernels.warp_shuffles() && group_size <= 128 && (group_size & (group_size - 1)) == 0;
}

// The elements of the token kernel's staged input: the longer of a layer's inputs (x, or hb for w2).
int staged_elements(const Config& c) { return std::max(c.dim, c.hidden_dim); }

// Whether a stack is one allocation the token kernel can walk.
bool whole(const LayerStack* stack) { return stack && stack->whole()() != nullptr; }

}  // namespace

bool TokenKernel::wanted(const DeviceInfo& device, const LaunchShape& shape, const WeightFormat& weights,
                         const Config& c, const CapacityPlan& plan, Finalize finalize, std::string& why_not) {
    // Local memory: the staged input (the longer of dim and hidden_dim, in the format's staged bytes), the
    // reduction scratch, attention's partial sums and the argmax's indices (two floats, a float4 and an int
    // per work-item), attention's scores (a chunk's, no longer than the context: token.cl), and room for
    // the compiler's own.
    const std::uint64_t scores = static_cast<std::uint64_t>(std::min(c.seq_len, KernelSet::kScoreCapacity));
    const std::uint64_t local_bytes = staged_input_bytes(weights, staged_elements(c)) +
                                      (7u * shape.local_size + scores) * sizeof(float) + 1024;
    const bool gpu = device.type == "GPU" && shape.gpu_family();
    const bool cpu = device.is_cpu && !shape.gpu_family() && shape.local_size == 1;
    if (shape.ordered)
        why_not = "the exact shape's ordered sums run as kernels of their own";
    else if (!gpu && !cpu)
        why_not = "the token kernel runs on GPUs with the gpu work shape and on CPUs with the cpu or exact shape";
    else if (device.scopes_standard.empty())  // (a build that fails where the device has them is an error)
        why_not = "the device reports " + device.version + ", and the grid barrier needs OpenCL 2.0's memory scopes";
    else if (!plan.resident())
        why_not = "the layers stream through the device (--layers-per-offload below n_layers)";
    else if (finalize != Finalize::device)
        why_not = "the classifier runs on the CPU (--finalize=cpu)";
    else if (c.classifier_format() != c.weight_format)
        why_not = "the classifier's weights are " + c.classifier_format().describe() + ", the layers' " +
                  c.weight_format.describe();
    else if (local_bytes > device.local_mem_bytes)
        why_not = "a layer's input does not fit in the token kernel's local memory";
    else
        return true;
    return false;
}

std::unique_ptr<TokenKernel> TokenKernel::create(Device& device, KernelSet& kernels, const Config& c,
                                                 const WeightStaging& weights, const KvCache& kv,
                                                 const WorkingBuffers& work, std::string& why_not) {
    // The tensors of all layers, by the names of forward_token's arguments.
    const auto stack = [&](cl::Buffer LayerBuffers::*t) { return weights.stack(t); };
    const std::array<std::pair<const char*, const LayerStack*>, 11> stacks = {{
        {"rms_att", stack(&LayerBuffers::rms_att)}, {"wq", stack(&LayerBuffers::wq)}, {"wk", stack(&LayerBuffers::wk)},
        {"wv", stack(&LayerBuffers::wv)}, {"wo", stack(&LayerBuffers::wo)}, {"rms_ffn", stack(&LayerBuffers::rms_ffn)},
        {"w1", stack(&LayerBuffers::w1)}, {"w2", stack(&LayerBuffers::w2)}, {"w3", stack(&LayerBuffers::w3)},
        {"key_cache", &kv.all_keys()}, {"value_cache", &kv.all_values()}}};
    if (std::any_of(stacks.begin(), stacks.end(), [](const auto& s) { return !whole(s.second); })) {
        why_not = "a tensor of all layers exceeds the device's largest allocation";
        return nullptr;
    }
    const auto stride = [&](std::string_view name) {
        const auto at = std::find_if(stacks.begin(), stacks.end(), [&](const auto& s) { return s.first == name; });
        return std::to_string(at->second->stride());
    };
    if (weights.classifier().size() != 1) {
        why_not = "the classifier is split over allocations";
        return nullptr;
    }
    const int local = kernels.shape().local_size;
    const int staged = staged_elements(c);

    const bool gpu = kernels.shape().gpu_family();
    // The model's shape, and for GPUs the run's positions (token.cl says why only there).
    const std::string model = " -DDIM=" + std::to_string(c.dim) + " -DKV_DIM=" + std::to_string(c.kv_dim()) +
                              " -DHIDDEN_DIM=" + std::to_string(c.hidden_dim) + " -DN_LAYERS=" +
                              std::to_string(c.n_layers) + " -DN_HEADS=" + std::to_string(c.n_heads) +
                              " -DKV_MUL=" + std::to_string(c.kv_mul()) + " -DVOCAB=" + std::to_string(c.vocab_size) +
                              " -DSTRIDE_NORM=" + stride("rms_att") + " -DSTRIDE_ATTN=" + stride("wq") +
                              " -DSTRIDE_KV=" + stride("wk") + " -DSTRIDE_FFN=" + stride("w1") +
                              (gpu ? " -DSEQ_LEN=" + std::to_string(c.seq_len) + " -DSTRIDE_CACHE=" + stride("key_cache")
                                   : "");
    // NVIDIA: unless capped, its compiler gives the kernel more than half a compute unit's registers, and
    // only one work-group per compute unit runs (CL_KERNEL_WORK_GROUP_SIZE does not show it: 256 either way).
    const std::string cap = register_cap_option(device.info(), kGroupsPerComputeUnit, local);
    const bool capped = !cap.empty();
    // Quantized formats' inputs quantized once (token.cl tells w2's input from wo's by its length), where
    // they are long: w2's, and wo's by attention's work-groups where every head's output is whole groups
    // that one pass of a work-group's work-items covers.
    const int gs = c.weight_format.group_size;
    const bool by_words = gpu && c.weight_format.quantized() && quantizes_by_words(kernels, gs) &&
                          c.hidden_dim != c.dim;
    const bool quantize_once = by_words && c.hidden_dim / 4 > kQuantizeOnceWords * local;
    const bool quantize_wo = by_words && c.head_size() % gs == 0 && c.head_size() / 4 <= local &&
                             c.dim / 4 >= kQuantizeWoWords * local;
    const std::string options = model + cap + (quantize_once ? " -DQUANTIZE_W2_ONCE" : "") +
                                (quantize_wo ? " -DQUANTIZE_WO_INPUT" : "");
    cl::Kernel kernel(kernels.token_program(options, c.dim, c.hidden_dim), "forward_token");

    // Two work-groups per compute unit where the kernel's registers allow (capped as above, or its largest
    // work-group holds two of ours), else one. Should they not all run at once, the kernel gives up and
    // fewer_groups() takes one.
    const std::size_t fits = kernel.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(device.device());
    if (fits < static_cast<std::size_t>(local)) {
        why_not = "the token kernel's work-group of " + std::to_string(local) + " does not fit a compute unit";
        return nullptr;
    }
    const int compute_units = static_cast<int>(device.info().compute_units);
    // CPU shapes: a work-group per CPU this process may run on, up to the compute units: two on one CPU
    // would wait out each other's time slices at every barrier.
    const int groups = !gpu    ? std::min(compute_units, usable_cpus())
                       : capped ? kGroupsPerComputeUnit * compute_units
                                : static_cast<int>(std::min<std::size_t>(kGroupsPerComputeUnit, fits / local)) *
                                      compute_units;

    const cl_uint spin_limit = gpu ? kGpuSpinLimit : kCpuSpinLimit;
    const ClassifierBlock& cls = weights.classifier().front();
    // Attention's chunk length at every position, as the per-op schedule passes it (a launch runs several).
    PositionRows chunk_lens(
        device, c.seq_len, sizeof(cl_int),
        [&kernels, heads = c.n_heads, head_size = c.head_size()](int first, int count, std::byte* out) {
            for (int i = 0; i < count; ++i) {
                const cl_int length = kernels.attention_chunk_len(heads, head_size, first + i);
                std::memcpy(out + i * sizeof length, &length, sizeof length);
            }
        },
        "attention chunk lengths");
    cl::Buffer sync = device.allocate(3 * sizeof(cl_uint), "token kernel barrier");
    const std::uint64_t xq_bytes = std::max({std::uint64_t{1},
                                             quantize_once ? staged_input_bytes(c.weight_format, c.hidden_dim) : 0,
                                             quantize_wo ? staged_input_bytes(c.weight_format, c.dim) : 0});
    cl::Buffer xq = device.allocate(xq_bytes, "the token kernel's quantized inputs");

    // The arguments that stay; launch() binds the positions and the barrier's base.
    std::vector<KernelArg> args = {
        {"x", work.x},           {"rope", weights.rope_table()}, {"q", work.q},
        {"xb", work.xb},         {"hb", work.hb},                {"att", work.att},
        {"xn", work.xn},         {"xq", xq},                     {"att_partial", work.att_partial},
        {"att_arrivals", work.att_arrivals}, {"rms_final", weights.rms_final()}, {"wcls", cls.weights},
        {"logits", work.logits}, {"tokens", work.tokens},        {"argmax_partial", work.argmax_partial},
        {"chunk_lens", chunk_lens.buffer()}, {"sync", sync}, {"spin_limit", spin_limit},
        {"staged", cl::Local(static_cast<std::size_t>(staged_input_bytes(kernels.weight_layout().format, staged)))},
        {"seq_len", c.seq_len}, {"stride_cache", static_cast<cl_int>(kv.all_keys().stride())}};
    for (const auto& [name, s] : stacks) args.emplace_back(name, s->whole());
    bind_args(kernel, signatures::forward_token, args);
    // token.cl's grid barriers: five a layer (six quantizing w2's input once), token_cpu.cl's one more
    // before the classifier.
    const int barriers = (quantize_once ? 6 : 5) * c.n_layers + (gpu ? 0 : 1);
    std::unique_ptr<TokenKernel> token(
        new TokenKernel(device, kernel, std::move(chunk_lens), sync, xq, work, c, groups, local, barriers, spin_limit));
    token->clear();
    return token;
}

TokenKernel::TokenKernel(Device& device, cl::Kernel kernel, PositionRows chunk_lens, cl::Buffer sync, cl::Buffer xq,
                         const WorkingBuffers& work, const Config& c, int groups, int local_size,
                         int barriers_per_position, cl_uint spin_limit)
    : device_(device),
      kernel_(std::move(kernel)),
      chunk_lens_(std::move(chunk_lens)),
      sync_(std::move(sync)),
      xq_(std::move(xq)),
      logits_(work.logits),
      arrivals_(work.att_arrivals),
      vocab_(c.vocab_size),
      n_heads_(c.n_heads),
      barriers_per_position_(barriers_per_position),
      groups_(groups),
      local_size_(local_size),
      spin_limit_(spin_limit) {}

int TokenKernel::groups() const { return groups_; }

void TokenKernel::clear() {
    const std::array<cl_uint, 3> zero = {0, 0, 0};
    device_.queue().enqueueWriteBuffer(sync_, CL_TRUE, 0, sizeof zero, zero.data());
    const float no_mark = 0.0f;
    device_.queue().enqueueWriteBuffer(logits_, CL_TRUE, static_cast<std::size_t>(vocab_) * sizeof(float),
                                       sizeof no_mark, &no_mark);
    // A launch that gave up may have left some of a head's attention chunks counted.
    const std::vector<cl_uint> no_arrivals(static_cast<std::size_t>(n_heads_), 0);
    device_.queue().enqueueWriteBuffer(arrivals_, CL_TRUE, 0, no_arrivals.size() * sizeof(cl_uint), no_arrivals.data());
    sync_base_ = 0;
}

bool TokenKernel::fewer_groups() {
    // Whatever runs next, this kernel with fewer groups or the per-op kernels, starts from zeroed counts:
    // the launch that gave up may have left attention's chunk counts (shared with the per-op attention)
    // part way.
    clear();
    const int one_per_compute_unit = static_cast<int>(device_.info().compute_units);
    if (groups_ <= one_per_compute_unit) return false;
    groups_ = one_per_compute_unit;
    return true;
}

void TokenKernel::enqueue(int pos, cl::Event* event) { launch(pos, 1, false, 0, event); }

void TokenKernel::enqueue_greedy(int first, int count, int chosen_from, cl::Event* event) {
    launch(first, count, true, chosen_from, event);
}

void TokenKernel::launch(int first, int count, bool greedy, int chosen_from, cl::Event* event) {
    bind_args(kernel_, signatures::forward_token,
         {{"first", first}, {"count", count}, {"greedy", greedy ? 1 : 0}, {"chosen_from", chosen_from},
          {"sync_base", sync_base_}});
    const int groups = this->groups();
    device_.queue().enqueueNDRangeKernel(kernel_, cl::NullRange, cl::NDRange(groups * local_size_),
                                         cl::NDRange(local_size_), nullptr, event);
    // The grid barriers of each position, and one between positions (greedy decoding's next token needs
    // none of its own: the last work-group done with the classifier picks it).
    sync_base_ += static_cast<cl_uint>((count * barriers_per_position_ + count - 1) * groups);
    // (The arguments were taken at the enqueue: the next launch polls as long as usual again.)
    if (give_ups_ > 0 && --give_ups_ == 0) bind_args(kernel_, signatures::forward_token, {{"spin_limit", spin_limit_}});
}

void TokenKernel::give_up_next(int launches) {
    give_ups_ = launches;
    bind_args(kernel_, signatures::forward_token, {{"spin_limit", launches > 0 ? 1u : spin_limit_}});
}

}  // namespace llamacl
