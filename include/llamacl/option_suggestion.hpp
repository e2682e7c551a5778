#pragma once
// What a user most likely meant by an argument a command does not take: the nearest of its options
// (`--temp` is -t/--temperature, `--top_p` is -p/--top-p), and the help that lists them all.
#include <optional>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace llamacl {

// `options` holds each option's spellings ("-t", "--temperature"). The spellings of the option nearest to
// `typed`, joined by '/': one spelled the same but for dashes, case and '_' for '-'; else the first whose
// long name `typed` begins (3 characters at least); else the fewest edits away, at most a third of
// `typed`'s letters (one at least). nullopt when none is that near.
std::optional<std::string> nearest_option(const std::string& typed, const std::vector<std::vector<std::string>>& options);

// Where a parse error in `command` points: " (see llama-cl COMMAND --help)", or " (see llama-cl --help)"
// for the app itself.
std::string see_help(const CLI::App& command);

// The message for arguments that `command` (a subcommand, or the app) did not take, `extras` in the order
// given: the first that looks like an option, with the nearest option of that command, else the first
// word; then the command's help.
std::string unexpected_arguments_message(const CLI::App& command, const std::vector<std::string>& extras);

}  // namespace llamacl
