#include "support.hpp"

#include <sys/resource.h>
#include <sys/wait.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>

namespace llamacl::test {

namespace fs = std::filesystem;

std::optional<fs::path> shared_dir() {
    const char* env = std::getenv("LLAMACL_SHARED_DIR");
    fs::path dir = env && *env ? fs::path(env) : fs::path(LLAMACL_DEFAULT_SHARED_DIR);
    if (fs::is_directory(dir / "models") && fs::is_directory(dir / "reference")) return dir;
    return std::nullopt;
}

TempDir::TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("llamacl-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(path_);
}

TempDir::~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

CommandResult run_command(const std::string& command) {
    TempDir dir;
    const fs::path out = dir / "stdout", err = dir / "stderr";
    const std::string full = command + " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
    // As std::system, but waited for with wait4: its rusage is the shell's and that of every process the
    // shell waited for, so ru_maxrss is the command's peak memory (and at least ours at the fork: the
    // kernel keeps a peak across exec, after fork and posix_spawn alike).
    const char* argv[] = {"sh", "-c", full.c_str(), nullptr};
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("cannot start /bin/sh for: " + command);
    if (pid == 0) {  // only async-signal-safe calls between fork and exec
        ::execv("/bin/sh", const_cast<char* const*>(argv));
        ::_exit(127);
    }
    int status = 0;
    rusage usage{};
    while (wait4(pid, &status, 0, &usage) < 0)
        if (errno != EINTR) throw std::runtime_error("wait4 failed for: " + command);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return {code, read_file(out), read_file(err), usage.ru_maxrss};
}

std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
}

CommandResult run_llama_cl(const std::string& args) {
    return run_command(std::string("'") + LLAMACL_BINARY + "' " + args);
}

}  // namespace llamacl::test

#include "reference_cases.hpp"

namespace llamacl::test {

std::vector<ReferenceCase> load_cases(const fs::path& shared, const std::string& file) {
    std::istringstream in(read_file(shared / "reference" / file));
    std::vector<ReferenceCase> cases;
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        std::vector<std::string> f;
        std::size_t start = 0;
        for (std::size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
            f.push_back(line.substr(start, tab - start));
        f.push_back(line.substr(start));
        if (f.size() != 9) throw std::runtime_error(file + ": expected 9 fields in: " + line);
        cases.push_back({f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]});
    }
    return cases;
}

std::string generate_args(const fs::path& shared, const ReferenceCase& c, const std::string& extra) {
    std::string args = "generate " + quote((shared / "models" / c.model).string()) + " -z " +
                       quote((shared / "models" / c.tokenizer).string()) + " -t " + c.temperature + " -p " + c.topp +
                       " -s " + c.seed + " -n " + c.steps;
    if (!c.prompt.empty()) args += " -i " + quote(c.prompt);
    return args + (extra.empty() ? "" : " " + extra);
}

}  // namespace llamacl::test
