#pragma once
// The llama-cl command line (CLI11): generate, tokenize, info, quantize, devices, bench, check, chat, perplexity.
namespace llamacl {
// Parses argv, runs the subcommand and returns the process exit status: 0 success, 1 a bad file or
// device, 2 bad usage, 3 a --compare-cpu divergence, 4 a failed `check` rung.
int run_cli(int argc, char** argv);
// run_cli's parse alone: builds every command, reads argv and checks what needs no file, opening
// nothing. Returns the exit status when argv decides it (help, version, a usage error), else -1.
int parse_command_line(int argc, char** argv);
}  // namespace llamacl
