#pragma once
// The command line `llama-cl bench CHECKPOINT|--synthetic PRESET [options]`: parses and checks the
// options, loads the model, opens the device, runs the benchmark (bench.hpp) and prints its report
// (bench_report.hpp).
#include <cstdio>
#include <string>

#include "llamacl/runtime_args.hpp"

namespace CLI {
class App;
}

namespace llamacl {

struct BenchArgs {
    std::string checkpoint;
    std::string synthetic;  // a preset of synthetic.hpp, built in memory instead of a file
    int prompt = 0;  // --prompt: prefill positions timed per run (0: none)
    int tokens = 32;
    int context = 0;
    int runs = 3;
    std::string weights;  // --weights; empty: the file's own format
    RuntimeArgs runtime;
    double probe_mib = 0;
    bool profile = false;
    bool json = false;
    std::string plot;  // --plot: the roofline as an SVG file (needs --profile)
    bool quiet = false;  // -q: no progress lines, even on a terminal
};
void add_bench_command(CLI::App& app, BenchArgs& args);
// Runs the benchmark and writes the report (text or JSON) to `out`; returns the exit status. Throws
// llamacl::Error (usage errors with exit code 2) for run_cli to print.
int run_bench(const BenchArgs& args, std::FILE* out = stdout);

}  // namespace llamacl
