#include "llamacl/device_forward.hpp"

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "llamacl/error.hpp"
#include "llamacl/export.hpp"
#include "llamacl/kernel_args.hpp"
#include "llamacl/model_math.hpp"

namespace llamacl {

namespace {

bool out_of_memory(cl_int code) {
    return code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES || code == CL_OUT_OF_HOST_MEMORY;
}

// Throws Error where the kernels cannot run matrices of `format` (the layers' or the classifier's).
void require_device_format(const Checkpoint& ck, const DeviceInfo& device, const LaunchShape& shape,
                           const WeightFormat& format) {
    const Config& c = ck.config();
    if (!format.quantized()) return;
    if (!format.device_reads_groups()) {
        // Groups divide both widths: a multiple of 4 does so only where their greatest common divisor is one.
        const bool some_group_runs = std::gcd(c.dim, c.hidden_dim) % 4 == 0;
        throw Error(ck.path() + ": the OpenCL backend runs " + element_name(format.type) +
                    " weights in groups of a multiple of 4, and these are " + format.describe() +
                    (some_group_runs ? "; quantize the fp32 model again with llama-cl quantize --group-size " +
                                           std::to_string(default_group_size(c)) +
                                           " (a multiple of 4 that divides dim and hidden_dim), or " + cpu_reference_remedy()
                                     : "; no multiple of 4 divides both dim (" + std::to_string(c.dim) +
                                           ") and hidden_dim (" + std::to_string(c.hidden_dim) + "), so " +
                                           cpu_reference_remedy()));
    }
    const int longest = std::max(c.dim, c.hidden_dim);
    if (!staged_input_fits(device, shape, format, longest))
        throw Error(device.name + ": a work-group's " + std::to_string(device.local_mem_bytes) +
                    " bytes of local memory cannot hold the quantized input of " + std::to_string(longest) +
                    " weights that the " + element_name(format.type) + " kernels stage there" +
                    (shape.ordered ? " with their rows' terms (ask for fewer rows a work-group: exact:ROWxLOCAL with a "
                                     "larger ROW or a smaller LOCAL)"
                                   : "") +
                    "; " + cpu_reference_remedy());
}

}  // namespace

const Config& device_weights(const Checkpoint& ck, const DeviceInfo& device, const LaunchShape& shape) {
    const Config& c = ck.config();
    require_device_format(ck, device, shape, c.weight_format);
    if (c.table_format) require_device_format(ck, device, shape, *c.table_format);
    return c;
}

std::string describe_schedule(int token_groups, const std::string& per_op_reason) {
    return token_groups > 0 ? "token (the whole forward pass in one kernel launch of " + std::to_string(token_groups) +
                                  (token_groups == 1 ? " work-group)" : " work-groups)")
                            : "per-op (one kernel launch per step: " + per_op_reason + ")";
}

DeviceForward::DeviceForward(Device& device, const Checkpoint& ck, const DeviceOptions& options)
    : DeviceForward(device, ck, options, launch_shape_for(options.shape, device.info(), ck.weight_format())) {}

DeviceForward::DeviceForward(Device& device, const Checkpoint& ck, const DeviceOptions& options,
                             const LaunchShape& shape)
    : device_(device),
      ck_(ck),
      c_(within_positions(device_weights(ck, device.info(), shape), options.positions)),
      finalize_(options.finalize),
      plan_(plan_capacity(ck.config(), device.info(), options.finalize, options.layers_per_offload, options.memory_limit,
                          prefill_batch_for(shape, c_), options.positions)),
      // The kernels are built for the matrices' format (the file's, or --weights') and the model's norm.
      kernels_(device, shape, c_.weight_format, true, "", options.tensor_cores, c_.norm_eps, options.prompt_precision),
      own_classifier_kernels_(c_.table_format ? std::make_unique<KernelSet>(device, shape, *c_.table_format, true, "",
                                                                             TensorCores::never, c_.norm_eps)
                                              : nullptr),
      per_op_reason_(options.schedule == Schedule::per_op ? "--schedule per-op" : ""),
      stacked_(options.schedule != Schedule::per_op &&
               TokenKernel::wanted(device.info(), kernels_.shape(), kernels_.weight_layout().format, c_, plan_,
                                   finalize_, per_op_reason_)),
      work_(device, c_, kernels_.attention_chunks(c_.n_heads, c_.head_size(), c_.seq_len), kernels_.argmax_groups(),
            !kernels_.chunked_attention(), !kernels_.attention_tiles_possible(c_.head_size()), plan_.prefill_batch),
      kv_(device, c_, stacked_),
      weights_(device, ck, kernels_.weight_layout(), classifier_kernels().weight_layout(), plan_, options.finalize,
               options.host_mirror, stacked_, counters_) {
    // Should the token kernel still be refused here, the per-op kernels run on the stacked layout's
    // sub-buffers, as after a fallback.
    if (stacked_) token_ = TokenKernel::create(device, kernels_, c_, weights_, kv_, work_, per_op_reason_);
    if (!token_ && options.schedule == Schedule::token)
        throw Error(device.info().name + ": --schedule token is not possible here: " + per_op_reason_);
    if (finalize_ == Finalize::device) {
        logits_host_ = std::make_unique<PinnedBuffer>(
            device, static_cast<std::size_t>(c_.vocab_size + 1) * sizeof(float), "logits read-back");
    } else {
        hidden_.resize(c_.dim);
        normed_.resize(c_.dim);
        logits_.resize(c_.vocab_size);
    }
}

Error DeviceForward::device_error(const cl::Error& e) const {
    std::string message = device_.info().name + ": " + describe(e);
    if (out_of_memory(e.err())) {
        message += ": the device ran out of memory (" + plan_.describe() + ")";
        std::string remedies;
        if (plan_.layers_per_offload > 1) remedies = "--layers-per-offload " + std::to_string(plan_.layers_per_offload / 2);
        if (finalize_ == Finalize::device) remedies += (remedies.empty() ? "" : " or ") + std::string("--finalize=cpu");
        if (!remedies.empty()) message += "; try " + remedies;
    }
    return Error(message);
}

std::span<float> DeviceForward::forward(int token, int pos) { return forward(token, pos, {}); }

std::span<float> DeviceForward::forward(int token, int pos, const BoundaryObserver& observer) {
    try {
        run(token, pos, observer);
    } catch (const cl::Error& e) {
        throw device_error(e);
    }
    return result_logits();
}

std::span<float> DeviceForward::result_logits() {
    if (finalize_ == Finalize::device)
        return {static_cast<float*>(logits_host_->data()), static_cast<std::size_t>(c_.vocab_size)};
    return logits_;
}

std::span<float> DeviceForward::prefill(std::span<const int> tokens, int first, const LogitsObserver& each) {
    if (tokens.empty() || first < 0 || first + tokens.size() > static_cast<std::size_t>(c_.seq_len))
        throw std::invalid_argument("prefill: positions outside the context, or no token");
    // A prompt of one position (generate without -i) runs as a token does: the same work, without the
    // prefill kernels that a cold start would compile for it.
    if (fault_ || tokens.size() == 1 || !kernels_.prefill_possible(c_)) return Forward::prefill(tokens, first, each);
    const std::size_t row_bytes = static_cast<std::size_t>(c_.dim) * sizeof(float);
    std::span<float> logits;
    try {
        for (std::size_t done = 0; done < tokens.size();) {
            const std::size_t count = std::min<std::size_t>(prefill_batch(), tokens.size() - done);
            enqueue_prefill_batch(tokens.subspan(done, count), first + static_cast<int>(done));
            done += count;
            if (!each && done < tokens.size()) continue;  // only the prompt's last position is asked for
            // Each position asked for: its residual stream into x, then the classifier as after a token.
            for (std::size_t row = each ? 0 : count - 1; row < count; ++row) {
                device_.queue().enqueueCopyBuffer(work_.batch_x, work_.x, row * row_bytes, 0, row_bytes, nullptr,
                                                  log_event(Command::copy_last_row));
                counters_.enqueues++;
                enqueue_classifier({});
                read_result(false, {});
                logits = result_logits();
                if (each) each(first + static_cast<int>(done - count + row), logits);
            }
        }
    } catch (const cl::Error& e) {
        throw device_error(e);
    }
    return logits;
}

void DeviceForward::enqueue_prefill_batch(std::span<const int> tokens, int pos) {
    const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden = c_.hidden_dim, n = static_cast<int>(tokens.size());
    reach_position(pos + n - 1);
    const std::size_t row_bytes = static_cast<std::size_t>(dim) * sizeof(float);
    if (!embeddings_host_)
        embeddings_host_ = std::make_unique<PinnedBuffer>(device_, static_cast<std::size_t>(prefill_batch()) * row_bytes,
                                                          "prompt embeddings");
    if (embeddings_written_() != nullptr &&
        embeddings_written_.getInfo<CL_EVENT_COMMAND_EXECUTION_STATUS>() != CL_COMPLETE) {
        embeddings_written_.wait();
        counters_.host_waits++;
    }
    float* gathered = static_cast<float*>(embeddings_host_->data());
    for (int i = 0; i < n; ++i)
        std::copy_n(ck_.token_embedding() + static_cast<std::size_t>(tokens[i]) * dim, dim,
                    gathered + static_cast<std::size_t>(i) * dim);
    cl::Event* logged = log_event(Command::write_embeddings);
    device_.queue().enqueueWriteBuffer(work_.batch_x, CL_FALSE, 0, n * row_bytes, gathered, nullptr, &embeddings_written_);
    if (logged) *logged = embeddings_written_;
    counters_.enqueues++;
    counters_.input_bytes_uploaded += n * row_bytes;
    const auto norm = [&](const cl::Buffer& weight) {
        bind_args(kernels_.own().rmsnorm_rows, signatures::rmsnorm_rows,
             {{"x", work_.batch_x}, {"weight", weight}, {"out", work_.batch_xn}, {"n", dim}});
        launch({&kernels_.own().rmsnorm_rows, kernels_.groups(n)}, Command::rmsnorm_rows);
    };
    using Gemm = KernelSet::Gemm;
    // out (positions x rows, from out_offset) = in times w's rows, or added to what out holds (accumulate).
    const auto product = [&](const cl::Buffer& w, const cl::Buffer& in, const cl::Buffer& out, int out_offset,
                             int width, int rows, bool accumulate, Command command) {
        const KernelSet::Launch gemm = kernels_.gemm(Gemm::gemm, {rows}, n);
        bind_args(*gemm.kernel, signatures::gemm,
             {{"w", w}, {"in", in}, {"out", out}, {"out_offset", out_offset}, {"n", width}, {"rows", rows},
              {"positions", n}, {"accumulate", accumulate ? 1 : 0}});
        launch(gemm, command);
    };
    // A GEMM's input as its weights' format multiplies it: the activations, or for a quantized format each
    // position's row quantized (where runq.c quantizes it: once for wq, wk and wv, once for w1 and w3).
    // Quantized formats' products are not fused: RoPE and SwiGLU run after them (prefill_quantized.cl).
    const bool quantized = c_.weight_format.quantized();
    const auto gemm_input = [&](const cl::Buffer& in, int width) -> const cl::Buffer& {
        if (!quantized) return in;
        bind_args(kernels_.own().quantize_rows, signatures::quantize_rows,
             {{"x", in}, {"out", work_.batch_xq}, {"n", width}, {"staged", kernels_.staged_space(width)}});
        launch({&kernels_.own().quantize_rows, kernels_.groups(n)}, Command::quantize_rows);
        return work_.batch_xq;
    };
    const auto residual = [&](const cl::Buffer& w, const cl::Buffer& in, int width, Command command) {
        product(w, gemm_input(in, width), work_.batch_x, 0, width, dim, true, command);
    };
    const bool tiled_attention = kernels_.attention_tiles_possible(c_.head_size());
    const auto tiles_local = kernels_.attention_tiles_local(c_.head_size());
    for (int l = 0; l < c_.n_layers; ++l) {
        const LayerBuffers& w = weights_.acquire(l);
        // Attention: the batch's keys and values go straight into the cache, rotated there with the queries,
        // before any position of the batch attends to them.
        norm(w.rms_att);
        if (quantized) {  // the products, then RoPE
            const cl::Buffer& xn = gemm_input(work_.batch_xn, dim);
            const int kv_at_pos = pos * kv_dim;
            product(w.wq, xn, work_.batch_q, 0, dim, dim, false, Command::gemm_q);
            product(w.wk, xn, kv_.keys(l), kv_at_pos, dim, kv_dim, false, Command::gemm_k);
            product(w.wv, xn, kv_.values(l), kv_at_pos, dim, kv_dim, false, Command::gemm_v);
            bind_args(kernels_.own().rope_rows, signatures::rope_rows,
                 {{"q", work_.batch_q}, {"key_cache", kv_.keys(l)}, {"rope", weights_.rope_table()}, {"dim", dim},
                  {"kv_dim", kv_dim}, {"head_size", c_.head_size()}, {"pos", pos}, {"positions", n}});
            launch({&kernels_.own().rope_rows, kernels_.per_position((dim + kv_dim) / 2, n)}, Command::rope_rows);
        } else {
            const KernelSet::Launch qkv = kernels_.gemm(Gemm::qkv_rope, {dim, kv_dim, kv_dim}, n);
            bind_args(*qkv.kernel, signatures::gemm_qkv_rope,
                 {{"wq", w.wq}, {"wk", w.wk}, {"wv", w.wv}, {"in", work_.batch_xn}, {"rope", weights_.rope_table()},
                  {"q", work_.batch_q}, {"key_cache", kv_.keys(l)}, {"value_cache", kv_.values(l)}, {"dim", dim},
                  {"kv_dim", kv_dim}, {"head_size", c_.head_size()}, {"pos", pos}, {"positions", n}});
            launch(qkv, Command::gemm_qkv_rope);
        }
        if (tiled_attention) {
            bind_args(kernels_.own().attention_tiles, signatures::attention_tiles,
                 {{"q", work_.batch_q}, {"key_cache", kv_.keys(l)}, {"value_cache", kv_.values(l)},
                  {"out", work_.batch_xb}, {"n_heads", c_.n_heads}, {"head_size", c_.head_size()}, {"kv_dim", kv_dim},
                  {"kv_mul", c_.kv_mul()}, {"pos", pos}, {"positions", n}, {"queries", tiles_local[0]},
                  {"keys", tiles_local[1]}, {"scores", tiles_local[2]}, {"exchange", tiles_local[3]}});
            launch({&kernels_.own().attention_tiles, kernels_.attention_tiles_range(c_.n_heads, n)},
                   Command::attention_tiles);
        } else {
            bind_args(kernels_.own().attention_rows, signatures::attention_rows,
                 {{"q", work_.batch_q}, {"key_cache", kv_.keys(l)}, {"value_cache", kv_.values(l)},
                  {"att", work_.batch_att}, {"out", work_.batch_xb}, {"n_heads", c_.n_heads},
                  {"head_size", c_.head_size()}, {"kv_dim", kv_dim}, {"kv_mul", c_.kv_mul()}, {"seq_len", c_.seq_len},
                  {"pos", pos}, {"positions", n}});
            launch({&kernels_.own().attention_rows, kernels_.per_position(c_.n_heads, n)}, Command::attention_rows);
        }
        residual(w.wo, work_.batch_xb, dim, Command::gemm_wo);

        norm(w.rms_ffn);
        if (quantized) {  // the products, then SwiGLU
            const cl::Buffer& ffn_in = gemm_input(work_.batch_xn, dim);
            product(w.w1, ffn_in, work_.batch_hb, 0, dim, hidden, false, Command::gemm_w1);
            product(w.w3, ffn_in, work_.batch_hb_up, 0, dim, hidden, false, Command::gemm_w3);
            bind_args(kernels_.own().swiglu, signatures::swiglu,
                 {{"gate", work_.batch_hb}, {"up", work_.batch_hb_up}, {"count", n * hidden}});
            launch({&kernels_.own().swiglu, kernels_.per_position(n * hidden, 1)}, Command::swiglu);
        } else {
            const KernelSet::Launch gate_up = kernels_.gemm(Gemm::gate_up, {2 * hidden}, n);
            bind_args(*gate_up.kernel, signatures::gemm_gate_up,
                 {{"w1", w.w1}, {"w3", w.w3}, {"in", work_.batch_xn}, {"hb", work_.batch_hb}, {"dim", dim},
                  {"hidden_dim", hidden}, {"positions", n}});
            launch(gate_up, Command::gemm_gate_up);
        }
        residual(w.w2, work_.batch_hb, hidden, Command::gemm_w2);
    }
}

cl::Event* DeviceForward::log_event(Command command) {
    if (!launch_log_) return nullptr;
    return &launch_log_->emplace_back(LaunchRecord{command, cl::Event()}).event;
}

void DeviceForward::launch(const KernelSet::Launch& l, Command command) {
    device_.queue().enqueueNDRangeKernel(*l.kernel, cl::NullRange, l.range.global, l.range.local, nullptr,
                                         log_event(command));
    counters_.enqueues++;
}

void DeviceForward::write_embedding(int token) {
    // The mapping outlives the copy, so it need not be waited for.
    const std::size_t row_bytes = static_cast<std::size_t>(c_.dim) * sizeof(float);
    device_.queue().enqueueWriteBuffer(work_.x, CL_FALSE, 0, row_bytes,
                                       ck_.token_embedding() + static_cast<std::size_t>(token) * c_.dim, nullptr,
                                       log_event(Command::write_embedding));
    counters_.enqueues++;
    counters_.input_bytes_uploaded += row_bytes;
}

void DeviceForward::token_kernel_gave_up() {
    // Some work-group never ran while the others waited for it at a barrier, and the abandoned pass left
    // the residual stream half updated.
    if (token_->fewer_groups()) return;
    report(device_.info().name + " did not run the token kernel's work-groups at once; continuing with one "
           "command per step (--schedule per-op)");
    token_.reset();
    per_op_reason_ = "the token kernel's work-groups did not all run at once";
}

void DeviceForward::reach_position(int last) {
    weights_.reach_position(last);
    if (token_) token_->reach_position(last);
}

void DeviceForward::run(int token, int pos, const BoundaryObserver& observer) {
    reach_position(pos);
    write_embedding(token);
    // The token kernel has no boundaries to read back or corrupt: --compare-cpu runs one command per step.
    const bool whole_token = token_ && !observer && !fault_;
    if (whole_token) {
        token_->enqueue(pos, log_event(Command::forward_token));
        counters_.enqueues++;
    } else {
        enqueue_per_op(pos, observer);
    }

    read_result(whole_token, observer);
    if (whole_token && TokenKernel::gave_up(static_cast<const float*>(logits_host_->data()), c_.vocab_size)) {
        // Run this token again, from its embedding.
        token_kernel_gave_up();
        run(token, pos, observer);
    }
}

void DeviceForward::read_result(bool mark, const BoundaryObserver& observer) {
    cl::CommandQueue& queue = device_.queue();
    if (finalize_ == Finalize::device) {
        const std::size_t bytes = static_cast<std::size_t>(c_.vocab_size + (mark ? 1 : 0)) * sizeof(float);
        queue.enqueueReadBuffer(work_.logits, CL_TRUE, 0, bytes, logits_host_->data(), nullptr, log_event(Command::read_logits));
        counters_.bytes_read += bytes;
    } else {
        const std::size_t row_bytes = static_cast<std::size_t>(c_.dim) * sizeof(float);
        queue.enqueueReadBuffer(work_.x, CL_TRUE, 0, row_bytes, hidden_.data(), nullptr, log_event(Command::read_hidden));
        counters_.bytes_read += row_bytes;
        classify(ck_.config(), ck_.rms_final(), ck_.classifier(), hidden_.data(), normed_.data(), logits_.data());
        boundary_host(-1, Op::final_norm, normed_, observer);
        boundary_host(-1, Op::logits, logits_, observer);
    }
    counters_.enqueues++;
    counters_.host_waits++;
}

void DeviceForward::enqueue_per_op(int pos, const BoundaryObserver& observer) {
    const int dim = c_.dim, kv_dim = c_.kv_dim(), hidden = c_.hidden_dim;
    const std::size_t kv_at_pos = static_cast<std::size_t>(pos) * kv_dim;
    // Every layer launches the same shapes: the matrix-vector builds and ranges, and attention's chunks.
    using Matvec = KernelSet::Matvec;
    const KernelSet::Launch qkv = kernels_.matvec(Matvec::attn_qkv_rope, (dim + 2 * kv_dim) / 2, dim);
    const KernelSet::Launch wo = kernels_.matvec(Matvec::matvec_residual, dim, dim);
    const KernelSet::Launch gate_up = kernels_.matvec(Matvec::ffn_gate_up, hidden, dim);
    const KernelSet::Launch w2 = kernels_.matvec(Matvec::matvec_residual, dim, hidden);
    const int chunk_len = kernels_.attention_chunk_len(c_.n_heads, c_.head_size(), pos);
    const int chunks = attention_chunk_count(pos, chunk_len);

    for (int l = 0; l < c_.n_layers; ++l) {
        const LayerBuffers& w = weights_.acquire(l);

        bind_args(*qkv.kernel, signatures::attn_qkv_rope,
             {{"x", work_.x}, {"rms_weight", w.rms_att}, {"wq", w.wq}, {"wk", w.wk}, {"wv", w.wv},
              {"rope", weights_.rope_table()}, {"q", work_.q}, {"key_cache", kv_.keys(l)},
              {"value_cache", kv_.values(l)}, {"xn", work_.xn}, {"dim", dim}, {"kv_dim", kv_dim},
              {"head_size", c_.head_size()}, {"pos", pos}, {"staged", kernels_.staged_space(dim)},
              {"staged_n", kernels_.staged_count(dim)}});
        launch(qkv, Command::attn_qkv_rope);
        boundary(l, Op::attn_norm, work_.xn, 0, dim, observer);
        boundary(l, Op::q, work_.q, 0, dim, observer);
        boundary(l, Op::k, kv_.keys(l), kv_at_pos, kv_dim, observer);
        boundary(l, Op::v, kv_.values(l), kv_at_pos, kv_dim, observer);

        bind_args(kernels_.own().attention, signatures::attention,
             {{"q", work_.q}, {"key_cache", kv_.keys(l)}, {"value_cache", kv_.values(l)}, {"att", work_.att},
              {"out", work_.xb}, {"partial_out", work_.att_partial}, {"arrivals", work_.att_arrivals},
              {"n_heads", c_.n_heads}, {"head_size", c_.head_size()}, {"kv_dim", kv_dim}, {"kv_mul", c_.kv_mul()},
              {"seq_len", c_.seq_len}, {"pos", pos}, {"chunk_len", chunk_len}});
        launch({&kernels_.own().attention, kernels_.heads(c_.n_heads, chunks)}, Command::attention);
        boundary(l, Op::attention, work_.xb, 0, dim, observer);

        bind_args(*wo.kernel, signatures::matvec_residual,
             {{"w", w.wo}, {"in", work_.xb}, {"x", work_.x}, {"n", dim}, {"rows", dim},
              {"staged", kernels_.staged_space(dim)}, {"staged_n", kernels_.staged_count(dim)}});
        launch(wo, Command::matvec_residual_wo);
        boundary(l, Op::attn_residual, work_.x, 0, dim, observer);

        bind_args(*gate_up.kernel, signatures::ffn_gate_up,
             {{"x", work_.x}, {"rms_weight", w.rms_ffn}, {"w1", w.w1}, {"w3", w.w3}, {"hb", work_.hb},
              {"xn", work_.xn}, {"dim", dim}, {"hidden_dim", hidden}, {"staged", kernels_.staged_space(dim)},
              {"staged_n", kernels_.staged_count(dim)}});
        launch(gate_up, Command::ffn_gate_up);
        boundary(l, Op::ffn_norm, work_.xn, 0, dim, observer);
        boundary(l, Op::ffn_hidden, work_.hb, 0, hidden, observer);

        bind_args(*w2.kernel, signatures::matvec_residual,
             {{"w", w.w2}, {"in", work_.hb}, {"x", work_.x}, {"n", hidden}, {"rows", dim},
              {"staged", kernels_.staged_space(hidden)}, {"staged_n", kernels_.staged_count(hidden)}});
        launch(w2, Command::matvec_residual_w2);
        boundary(l, Op::ffn_residual, work_.x, 0, dim, observer);
    }
    enqueue_classifier(observer);
}

void DeviceForward::enqueue_classifier(const BoundaryObserver& observer) {
    const int dim = c_.dim;
    using Matvec = KernelSet::Matvec;
    if (finalize_ == Finalize::device) {
        KernelSet& kernels = classifier_kernels();
        // The classifier normalizes x itself, or reads xn normalized once before it.
        const bool separate_norm = kernels.separate_final_norm();
        if (separate_norm) {
            bind_args(kernels.own().rmsnorm, signatures::rmsnorm,
                 {{"x", work_.x}, {"weight", weights_.rms_final()}, {"out", work_.xn}, {"n", dim}});
            launch({&kernels.own().rmsnorm, kernels.rows(1)}, Command::rmsnorm_final);
        }
        const cl::Buffer& input = separate_norm ? work_.xn : work_.x;
        const cl::Buffer& norm_weight = separate_norm ? cl::Buffer() : weights_.rms_final();
        for (const ClassifierBlock& block : weights_.classifier()) {
            const KernelSet::Launch cls = kernels.matvec(Matvec::classifier, block.rows, dim);
            bind_args(*cls.kernel, signatures::classifier,
                 {{"x", input}, {"rms_weight", norm_weight}, {"w", block.weights}, {"logits", work_.logits},
                  {"xn", work_.xn}, {"dim", dim}, {"rows", block.rows}, {"row_base", block.first_row},
                  {"staged", kernels.staged_space(dim)}, {"staged_n", kernels.staged_count(dim)}});
            launch(cls, Command::classifier);
        }
        boundary(-1, Op::final_norm, work_.xn, 0, dim, observer);
        boundary(-1, Op::logits, work_.logits, 0, c_.vocab_size, observer);
    }
}

GreedyDecoder* DeviceForward::greedy_decoder() {
    // The table must be on the device whole; an injected fault (--compare-cpu's self-test) needs the
    // boundaries of the schedule forward() runs.
    const bool possible = finalize_ == Finalize::device && c_.shared_classifier && weights_.classifier().size() == 1 &&
                          !fault_;
    return possible ? this : nullptr;
}

void DeviceForward::start(int first, std::span<const int> forced, int end) {
    if (forced.empty() || first < 0 || first > end || end > c_.seq_len)
        throw std::invalid_argument("greedy decoding: positions outside the context, or no first token");
    Greedy& g = greedy_;
    if (!g.read_back) {
        g.read_back =
            std::make_unique<PinnedBuffer>(device_, (static_cast<std::size_t>(c_.seq_len) + 1) * sizeof(cl_int),
                                           "greedy token read-back");
    }
    // The host copy of the forced tokens may still be on its way from an earlier start() (no position of it
    // was read); anything the device still runs of that earlier decoding is before this one on the queue.
    if (g.forced_written() != nullptr) g.forced_written.wait();
    g.first = first;
    g.end = end;
    g.enqueued = first;
    g.current = forced[0];
    g.batches.clear();
    // Tokens up to position `end`, the last one next() returns.
    g.forced = static_cast<int>(std::min<std::size_t>(forced.size(), end + 1 - first));
    try {
        g.forced_tokens.assign(forced.begin(), forced.begin() + g.forced);
        // Positions read the token after theirs; the first one's is written straight to x.
        upload_forced(first + 1);
        write_embedding(g.current);
    } catch (const cl::Error& e) {
        throw device_error(e);
    }
}

void DeviceForward::upload_forced(int from) {
    Greedy& g = greedy_;
    const int forced_end = g.first + g.forced;
    if (from >= forced_end) return;
    device_.queue().enqueueWriteBuffer(work_.tokens, CL_FALSE, from * sizeof(cl_int),
                                       (forced_end - from) * sizeof(cl_int), &g.forced_tokens[from - g.first], nullptr,
                                       &g.forced_written);
    counters_.enqueues++;
}

void DeviceForward::enqueue_greedy_batch() {
    Greedy& g = greedy_;
    // Streamed layers go one position at a time: a batch's uploads would hold its first token back by a
    // whole batch of positions (seconds for a large model), for a read saved per position.
    const int batch = plan_.resident() ? kGreedyBatch : 1;
    const int first = g.enqueued, count = std::min(batch, g.end - first);
    const int chosen_from = g.first + g.forced;  // positions before it take the prompt's next token
    reach_position(first + count - 1);
    if (token_) {
        token_->enqueue_greedy(first, count, chosen_from, log_event(Command::forward_token));
        counters_.enqueues++;
    } else {
        for (int pos = first; pos < first + count; ++pos) {
            enqueue_per_op(pos, {});
            enqueue_next_token(pos, pos + 1 >= chosen_from);
        }
    }
    // The tokens after the batch's positions, each at its own index of the read-back.
    cl::Event read;
    const std::size_t at = (static_cast<std::size_t>(first) + 1) * sizeof(cl_int), bytes = count * sizeof(cl_int);
    device_.queue().enqueueReadBuffer(work_.tokens, CL_FALSE, at, bytes, static_cast<char*>(g.read_back->data()) + at,
                                      nullptr, &read);
    g.batches.push_back(Greedy::Batch{first, count, read, false});
    if (launch_log_) launch_log_->push_back({Command::read_tokens, read});
    counters_.enqueues++;
    counters_.bytes_read += bytes;
    g.enqueued += count;
    device_.queue().flush();  // nothing else would submit the batch while the host waits for an earlier one
}

void DeviceForward::enqueue_next_token(int pos, bool choose) {
    const int groups = kernels_.argmax_groups();
    if (choose) {
        bind_args(kernels_.own().argmax, signatures::argmax,
             {{"logits", work_.logits}, {"count", c_.vocab_size}, {"partial", work_.argmax_partial}});
        launch({&kernels_.own().argmax, kernels_.groups(groups)}, Command::argmax);
    }
    // The embedding row comes from the classifier's table, read in its layout.
    KernelSet& kernels = classifier_kernels();
    bind_args(kernels.own().argmax_embed, signatures::argmax_embed,
         {{"logits", work_.logits}, {"partial", work_.argmax_partial}, {"groups", groups}, {"choose", choose ? 1 : 0},
          {"tokens", work_.tokens}, {"pos", pos}, {"table", weights_.classifier().front().weights}, {"x", work_.x},
          {"dim", c_.dim}});
    launch({&kernels.own().argmax_embed, kernels.groups(1)}, Command::argmax_embed);
}

int DeviceForward::next(int pos) {
    Greedy& g = greedy_;
    try {
        // The batches before pos's are read; keep kGreedyBatches enqueued from pos's on, so the device runs
        // the next while the host takes this one's tokens.
        while (!g.batches.empty() && pos >= g.batches.front().first + g.batches.front().count) g.batches.pop_front();
        while (g.batches.size() < kGreedyBatches && g.enqueued < g.end) enqueue_greedy_batch();
        Greedy::Batch& batch = g.batches.front();
        if (!batch.read_done) {
            batch.read.wait();
            batch.read_done = true;
            counters_.host_waits++;
        }
        const int token = static_cast<const cl_int*>(g.read_back->data())[pos + 1];
        if (token >= 0) return g.current = token;
        if (token == kNonFiniteToken) throw NonFiniteLogits(pos);

        // The token kernel gave up at position pos (every position before it is done), and so did every
        // launch after it. Once they are done, run them again from pos: its token's embedding in x, and the
        // forced tokens after it restored (a launch that gives up marks the token after its position with -1).
        if (!token_) throw Error(device_.info().name + ": greedy decoding read no token at position " + std::to_string(pos));
        device_.queue().finish();
        counters_.host_waits++;
        token_kernel_gave_up();
        upload_forced(pos + 1);
        write_embedding(g.current);
        g.enqueued = pos;
        g.batches.clear();
    } catch (const cl::Error& e) {
        throw device_error(e);
    }
    return next(pos);
}

std::vector<float> DeviceForward::cache_rows(int layer, Op op, int first, int count) {
    const std::size_t kv_dim = static_cast<std::size_t>(c_.kv_dim());
    std::vector<float> rows(static_cast<std::size_t>(count) * kv_dim);
    try {
        device_.queue().enqueueReadBuffer(op == Op::k ? kv_.keys(layer) : kv_.values(layer), CL_TRUE,
                                          static_cast<std::size_t>(first) * kv_dim * sizeof(float),
                                          rows.size() * sizeof(float), rows.data());
    } catch (const cl::Error& e) {
        throw device_error(e);
    }
    return rows;
}

void DeviceForward::boundary(int layer, Op op, const cl::Buffer& buffer, std::size_t offset, std::size_t count,
                             const BoundaryObserver& observer) {
    const bool faulty = fault_ && fault_->layer == layer && fault_->op == op;
    if (!observer && !faulty) return;
    scratch_.resize(count);
    const std::size_t at = offset * sizeof(float), bytes = count * sizeof(float);
    device_.queue().enqueueReadBuffer(buffer, CL_TRUE, at, bytes, scratch_.data());
    if (faulty) {
        boundary_host(layer, op, scratch_, {});  // corrupts scratch_
        device_.queue().enqueueWriteBuffer(buffer, CL_TRUE, at, bytes, scratch_.data());
    }
    if (observer) observer(layer, op, scratch_);
}

void DeviceForward::boundary_host(int layer, Op op, std::span<float> values, const BoundaryObserver& observer) {
    if (fault_ && fault_->layer == layer && fault_->op == op && !values.empty()) {
        // Far outside any rounding: the element grows by the tensor's largest magnitude plus one.
        float largest = 0.0f;
        for (float v : values) largest = std::max(largest, std::fabs(v));
        values[values.size() / 2] += largest + 1.0f;
    }
    if (observer) observer(layer, op, values);
}

}  // namespace llamacl
