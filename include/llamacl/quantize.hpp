#pragma once
// `llama-cl quantize IN OUT`: a model's weights written in another format. An OUT named *.gguf gets a GGUF
// version 3 file that llama.cpp loads (write_gguf); any other name a llama2.c version-2 (Q8_0) file, as
// llama2.c's export.py writes it (export.hpp's write_version2).
#include <cstdint>
#include <functional>
#include <string>

#include "llamacl/checkpoint.hpp"
#include "llamacl/ggml_types.hpp"

namespace llamacl {

struct QuantizeArgs {
    std::string input, output;
    std::string type;           // --type: q4_0, q8_0, f16 or f32 (empty: q8_0)
    std::string fallback_type;  // --fallback-type, the same names (empty: q8_0)
    std::string classifier_type;  // --classifier-type: the classifier's (empty: --type)
    std::string tokenizer;      // -z: tokenizer.bin, the vocabulary of a GGUF file from a llama2.c model
    int group_size = 0;         // version 2's --group-size (0: default_group_size)
    bool force = false;         // --force: OUT may exist already, and is replaced
};

// Runs the command: writes OUT, then one line on stderr describing what was written. Throws Error for
// anything it refuses, before OUT exists.
int run_quantize(const QuantizeArgs& args);
// The names --type, --classifier-type and --fallback-type take, as help and errors list them ("q4_0, q8_0,
// f16 or f32"), and the one --type and --fallback-type default to.
std::string output_type_names();
const char* default_output_type();

struct GgufOutput {
    GgmlType type = GgmlType::q8_0;      // every matrix's (F32, F16, Q8_0 or Q4_0); norms stay F32
    GgmlType classifier = GgmlType::q8_0;  // the classifier's (output, or the shared token_embd), of the same four
    GgmlType fallback = GgmlType::q8_0;  // a matrix whose rows are not whole blocks of `type`; F16 where
                                         // not whole blocks of this either
    std::string tokenizer;               // tokenizer.bin, else the vocabulary of `ck`'s GGUF file
};

// Writes `ck` as a GGUF version 3 file at `path`: general.* and llama.* metadata from its Config, the
// vocabulary (every tokenizer.* key of `ck`'s GGUF file as it is, or tokenizer.bin's written as
// llama.cpp's convert-llama2c-to-ggml writes it), and llama.cpp's tensor names and shapes, the classifier
// omitted when shared. Each matrix is dequantized to f32 (when it is not) and encoded by encode_ggml. One
// line on stderr names each matrix written in a fallback type, and one says when quantized weights are
// quantized again. Refuses a tensor with a non-finite weight or a weight its type's halves cannot hold,
// naming it. Written aside and renamed (AtomicFile), never over an input. `progress(done, total)` is
// called after each tensor, in bytes of f32 weights.
void write_gguf(const Checkpoint& ck, const std::string& path, const GgufOutput& output,
                const std::function<void(std::uint64_t, std::uint64_t)>& progress = {});

}  // namespace llamacl
