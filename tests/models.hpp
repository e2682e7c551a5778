#pragma once
// Small models written by the project's own generator, for tests that must not depend on shared/.
#include <filesystem>
#include <string>

#include "llamacl/checkpoint.hpp"
#include "llamacl/synthetic.hpp"
#include "support.hpp"

namespace llamacl::test {

// A model shape with dim 48, 3 layers, 6 query heads over `kv_heads` KV heads (6: MHA, 2: GQA, 1: MQA).
inline Config small_config(int kv_heads = 2, bool shared = true) {
    return Config{48, 100, 3, 6, kv_heads, 300, 40, shared};
}

// A model whose runs of 200 positions or more read more than --backend auto's 512 MiB bound on a run it
// gives the CPU reference without starting OpenCL (cli.cpp), in every format: 8 layers of 0.44 MiB of
// f32 weights (0.22 MiB as f16, under auto's f16 crossover of 0.25), 1024 positions.
inline Config long_context_config() { return Config{96, 256, 8, 4, 4, 300, 1024, true}; }

// Writes a checkpoint and a matching tokenizer into `dir`; returns the checkpoint's path.
inline std::filesystem::path write_model(const TempDir& dir, const Config& c, int version = 0,
                                         std::uint64_t seed = 7, const std::string& name = "model.bin") {
    const std::filesystem::path path = dir / name;
    write_synthetic_checkpoint(path.string(), c, version, seed, 2);
    write_synthetic_tokenizer((dir / "tok.bin").string(), c.vocab_size);
    return path;
}

}  // namespace llamacl::test
