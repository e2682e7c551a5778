#pragma once
// The command line `llama-cl check [CHECKPOINT -z TOKENIZER] [options]`: parses the options, loads the
// model (or generates one), opens the device, climbs the ladder (check.hpp) and prints its report.
#include <cstdio>
#include <string>

#include "llamacl/runtime_args.hpp"

namespace CLI {
class App;
}

namespace llamacl {

struct CheckArgs {
    std::string checkpoint;  // empty: a generated model (synthetic.hpp's "tiny")
    std::string tokenizer = "tokenizer.bin";
    bool tokenizer_given = false;  // -z on the command line, not the default
    bool allow_vocab_mismatch = false;
    std::string weights;  // --weights: the model's rungs in this format alone (default: check_formats())
    RuntimeArgs runtime;
    std::string plot;  // roofline SVG path
    bool json = false;
};
void add_check_command(CLI::App& app, CheckArgs& args);
// Runs the ladder and writes the report to `out`: exit status 0 when every rung passed (or was skipped),
// 4 when one failed. Throws llamacl::Error for bad files, devices and usage.
int run_check_command(const CheckArgs& args, std::FILE* out = stdout);

}  // namespace llamacl
