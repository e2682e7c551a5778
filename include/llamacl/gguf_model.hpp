#pragma once
// Llama models in GGUF files (general.architecture "llama"): the Config from the llama.* metadata, and the
// tensors in one weight format the runtime reads, chosen from the file's types:
//   every matrix F32 -> f32; every matrix F16 -> f16 (both as stored);
//   every matrix Q4_0 -> q4_0, as stored;
//   every matrix Q8_0, or a mix of Q8_0 and Q4_0 -> q8_0 in blocks of 32 under ggml's rule (a Q4_0 weight
//   q - 8 is an int8 with the block's scale: the same products as ggml's vec_dot_q4_0_q8_0);
//   anything else (BF16, the other quantized types, a mix) -> f32, as ggml's reference dequantization
//   gives it, which the checkpoint's load_note() says.
// Norms are f32. The tensor layout ([out][in] rows, adjacent RoPE pairs) is llama2.c's.
#include <string>

#include "llamacl/checkpoint.hpp"
#include "llamacl/gguf_file.hpp"

namespace llamacl {

// The model in `file`. Throws llamacl::Error naming the file and the key or tensor for another
// architecture, a missing or malformed key, a missing tensor or one of the wrong shape, and a type that
// cannot be read.
Checkpoint read_gguf_model(const GgufFile& file);

}  // namespace llamacl
