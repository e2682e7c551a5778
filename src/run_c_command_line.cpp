#include "llamacl/run_c_command_line.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace llamacl {

std::vector<std::string> with_run_c_command(std::vector<std::string> args, const std::vector<std::string>& commands) {
    if (args.size() < 2) return args;
    const auto is_command = [&](const std::string& word) {
        return std::find(commands.begin(), commands.end(), word) != commands.end();
    };
    std::error_code ec;
    if (!is_command(args[1]) && !args[1].starts_with("-") && std::filesystem::exists(args[1], ec) &&
        !std::filesystem::is_directory(args[1], ec))
        args.insert(args.begin() + 1, "generate");
    if (args[1] != "generate" && args[1] != "chat") return args;
    // The last -m wins, as every repeated option does; after "--" every word is text.
    std::string mode;
    for (std::size_t i = 2; i < args.size() && args[i] != "--"; ++i) {
        if ((args[i] == "-m" || args[i] == "--mode") && i + 1 < args.size())
            mode = args[++i];
        else if (args[i].starts_with("--mode="))
            mode = args[i].substr(7);
    }
    if (mode == "generate" || mode == "chat") args[1] = mode;
    return args;
}

}  // namespace llamacl
