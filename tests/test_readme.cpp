// The README's machine-read commands (between their <!-- NAME --> markers, as .ci/run extracts them) in
// the places people first run them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support.hpp"

using namespace llamacl::test;

namespace {

// The one line between `<!-- marker -->` and `<!-- /marker -->`, fences left out.
std::string machine_read_command(const std::string& readme, const std::string& marker) {
    const std::size_t open = readme.find("<!-- " + marker + " -->"), close = readme.find("<!-- /" + marker + " -->");
    if (open == std::string::npos || close == std::string::npos) return "";
    std::string command;
    for (std::size_t at = readme.find('\n', open) + 1; at < close;) {
        const std::size_t end = readme.find('\n', at);
        const std::string line = readme.substr(at, end - at);
        if (!line.starts_with("```")) command += line;
        at = end + 1;
    }
    return command;
}

// An executable script `name` in `dir` that appends its name and arguments to `dir`/log, then runs `then`.
void write_stub(const std::filesystem::path& dir, const std::string& name, const std::string& then) {
    const std::filesystem::path path = dir / name;
    std::ofstream(path) << "#!/bin/sh\necho " << name << " \"$@\" >> " << quote((dir / "log").string()) << "\n"
                        << then << "\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

}  // namespace

// The install step runs with sudo where it is installed and without it where it is not (a root container,
// the first thing many users try): here apt-get and sudo are stubs that log their calls.
TEST(Readme, TheInstallStepRunsWithAndWithoutSudo) {
    const std::string readme = read_file(std::filesystem::path(LLAMACL_SOURCE_DIR) / "README.md");
    for (const char* marker : {"run-command", "test-command"}) {
        SCOPED_TRACE(marker);
        const std::string command = machine_read_command(readme, marker);
        const std::size_t build = command.find(" && cmake ");
        ASSERT_NE(build, std::string::npos) << command;
        const std::string install = command.substr(0, build);
        for (const bool with_sudo : {false, true}) {
            TempDir bin;
            write_stub(bin.path(), "apt-get", "exit 0");
            if (with_sudo) write_stub(bin.path(), "sudo", "exec \"$@\"");
            // PATH holds the stubs alone: no system sudo can answer for a missing one.
            const CommandResult r = run_command("PATH=" + quote(bin.path().string()) + " /bin/sh -c " + quote(install));
            EXPECT_EQ(r.exit_code, 0) << "with sudo: " << with_sudo << "\n" << r.err;
            const std::string log = read_file(bin / "log");
            EXPECT_NE(log.find("apt-get install -y cmake g++"), std::string::npos) << log;
            EXPECT_EQ(log.find("sudo apt-get install -y cmake g++") != std::string::npos, with_sudo) << log;
        }
    }
}
