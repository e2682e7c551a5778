// make-checkpoint: writes a llama2.c checkpoint of any shape with seeded random weights (and optionally a
// matching byte-level tokenizer), for tests and benchmarks. Weights depend only on the seed and shape.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <limits>

#include "llamacl/error.hpp"
#include "llamacl/runtime_args.hpp"
#include "llamacl/synthetic.hpp"

int main(int argc, char** argv) {
    CLI::App app{"Write a llama2.c checkpoint with seeded random weights."};
    std::string out, preset, tokenizer;
    llamacl::Config c{};
    int version = 0;
    std::uint64_t seed = 1;
    unsigned threads = 0;
    bool unshared = false;
    app.add_option("output", out, "checkpoint file to write")->required();
    std::string presets;
    for (const auto& name : llamacl::preset_names()) presets += (presets.empty() ? "" : ", ") + name;
    app.add_option("--preset", preset, "named shape: " + presets);
    const CLI::Validator decimal = llamacl::decimal_int();  // 010 is ten, as llama-cl reads its counts
    app.add_option("--dim", c.dim, "transformer width")->transform(decimal);
    app.add_option("--hidden-dim", c.hidden_dim, "FFN width")->transform(decimal);
    app.add_option("--layers", c.n_layers, "number of layers")->transform(decimal);
    app.add_option("--heads", c.n_heads, "query heads")->transform(decimal);
    app.add_option("--kv-heads", c.n_kv_heads, "key/value heads (default: --heads)")->transform(decimal);
    app.add_option("--vocab", c.vocab_size, "vocabulary size")->transform(decimal);
    app.add_option("--seq-len", c.seq_len, "maximum context")->transform(decimal);
    app.add_flag("--unshared", unshared, "store a separate classifier matrix (v0: negative vocab_size)");
    app.add_option("--version", version, "file format: 0 (legacy) or 1 (ak42 export)")->check(CLI::IsMember({0, 1}));
    app.add_option("--seed", seed, "random seed");
    app.add_option("--threads", threads, "writer threads (default: all cores)")
        ->transform(llamacl::decimal_integer(0, std::numeric_limits<int>::max(),
                                             "a whole number from 0 to 2147483647", "COUNT"));
    app.add_option("--tokenizer", tokenizer, "also write a byte-level tokenizer with --vocab entries here");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {  // one line, as llama-cl's own
        std::fprintf(stderr, "make-checkpoint: %s (see make-checkpoint --help)\n", e.what());
        return 2;
    }

    try {
        llamacl::Config shape = c;
        if (!preset.empty()) {
            const auto p = llamacl::preset_config(preset);
            if (!p) throw llamacl::usage_error("--preset: unknown preset '" + preset + "' (known: " + presets + ")");
            shape = *p;
            // Explicit dimensions override the preset's.
            for (auto [field, value] : {std::pair{&shape.dim, c.dim}, {&shape.hidden_dim, c.hidden_dim},
                                        {&shape.n_layers, c.n_layers}, {&shape.n_heads, c.n_heads},
                                        {&shape.n_kv_heads, c.n_kv_heads}, {&shape.vocab_size, c.vocab_size},
                                        {&shape.seq_len, c.seq_len}})
                if (value != 0) *field = value;
        }
        if (shape.n_kv_heads == 0) shape.n_kv_heads = shape.n_heads;
        if (unshared) shape.shared_classifier = false;
        // Refused before the checkpoint is written, not after.
        if (!tokenizer.empty() && shape.vocab_size < llamacl::kMinSyntheticVocab)
            throw llamacl::usage_error("--tokenizer: a synthetic tokenizer needs at least " +
                                       std::to_string(llamacl::kMinSyntheticVocab) + " entries (--vocab " +
                                       std::to_string(shape.vocab_size) + ")");
        const auto start = std::chrono::steady_clock::now();
        llamacl::write_synthetic_checkpoint(out, shape, version, seed, threads);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "wrote %s: %.1f MB in %.1f s\n", out.c_str(),
                     static_cast<double>(llamacl::checkpoint_file_bytes(shape, version)) / 1e6, seconds);
        if (!tokenizer.empty()) llamacl::write_synthetic_tokenizer(tokenizer, shape.vocab_size);
    } catch (const llamacl::Error& e) {
        std::fprintf(stderr, "make-checkpoint: %s\n", e.what());
        return e.exit_code();
    }
    return 0;
}
