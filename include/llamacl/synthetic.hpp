#pragma once
// Seeded random models for tests and benchmarks: llama2.c checkpoints of any shape (v0 or v1), written
// to disk in parallel or built in memory, plus a matching byte-level tokenizer.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "llamacl/checkpoint.hpp"

namespace llamacl {

// Named shapes: stories15M, stories110M, llama3.2-1b, llama2-7b, and "tiny" for fast tests.
std::optional<Config> preset_config(const std::string& name);
std::vector<std::string> preset_names();

// The complete file for `config` as `version` (0 or 1). Every weight is a pure function of
// (seed, tensor, index), so the bytes do not depend on the number of threads.
std::uint64_t checkpoint_file_bytes(const Config& config, int version);
HostBytes synthetic_checkpoint_image(const Config& config, int version, std::uint64_t seed);
// Streams the same bytes to `path` with `threads` writers (0: hardware concurrency).
void write_synthetic_checkpoint(const std::string& path, const Config& config, int version,
                                std::uint64_t seed, unsigned threads = 0);

// A llama2.c tokenizer.bin with exactly `vocab_size` entries: <unk>, <s>, </s>, the 256 byte pieces
// <0x00>..<0xFF>, " ", printable ASCII characters, then letter pairs as merges with falling scores.
// The fewest entries a synthetic tokenizer has: the specials, the bytes and the " " that encode's dummy
// prefix looks up.
inline constexpr int kMinSyntheticVocab = 260;
// Needs vocab_size >= kMinSyntheticVocab.
void write_synthetic_tokenizer(const std::string& path, int vocab_size);

}  // namespace llamacl
