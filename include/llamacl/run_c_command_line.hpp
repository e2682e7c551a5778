#pragma once
// run.c's command line, `run MODEL [flags]`, read as llama-cl's, which names a command first.
#include <string>
#include <vector>

namespace llamacl {

// `args` (argv whole) with the command that run.c's habits mean in place: a first argument that is a file
// and no command runs generate on it, as `run MODEL` does; run.c's -m/--mode chat or generate, given to
// either command, picks that command. `commands` are the command names.
std::vector<std::string> with_run_c_command(std::vector<std::string> args, const std::vector<std::string>& commands);

}  // namespace llamacl
