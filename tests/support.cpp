#include "support.hpp"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <mutex>
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

void expect_error(const CommandResult& r, int code, std::initializer_list<std::string> mentions,
                  const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_NE(r.exit_code, 124) << "timed out";
    EXPECT_LT(r.exit_code, 128) << "crashed: " << r.err;
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr must be exactly one line:\n" << r.err;
    EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << r.err;
    EXPECT_EQ(r.err.rfind("llama-cl: ", 0), 0u) << r.err;
    for (const std::string& m : mentions) EXPECT_NE(r.err.find(m), std::string::npos) << "expected \"" << m << "\" in: " << r.err;
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

namespace {

struct Exit {
    int code;
    long peak_rss_kib;
};

// `sh -c line`, waited for with wait4: its rusage is the shell's and that of every process the shell
// waited for, so ru_maxrss is the command's peak memory, counted from the fork (the kernel keeps a
// process's peak across exec). Code -1: the shell could not be started or waited for.
Exit run_shell(const std::string& line) {
    const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
    const pid_t pid = ::fork();
    if (pid < 0) return {-1, 0};
    if (pid == 0) {  // only async-signal-safe calls between fork and exec
        ::execv("/bin/sh", const_cast<char* const*>(argv));
        ::_exit(127);
    }
    int status = 0;
    rusage usage{};
    while (wait4(pid, &status, 0, &usage) < 0)
        if (errno != EINTR) return {-1, 0};
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), usage.ru_maxrss};
}

bool read_all(int fd, void* to, std::size_t n) {
    for (char* p = static_cast<char*>(to); n > 0;) {
        const ssize_t got = ::recv(fd, p, n, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}

// (MSG_NOSIGNAL: a launcher that has gone is a false return, not SIGPIPE.)
bool write_all(int fd, const void* from, std::size_t n) {
    for (const char* p = static_cast<const char*>(from); n > 0;) {
        const ssize_t put = ::send(fd, p, n, MSG_NOSIGNAL);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return false;
        p += put;
        n -= static_cast<std::size_t>(put);
    }
    return true;
}

// Commands start from a launcher, a process forked before main() while this one is small: forked from
// here later, every command's peak would include what the tests have loaded by then (a GPU driver holds
// hundreds of MiB). It runs one command line at a time, sent over a socket, and answers with its Exit.
class Launcher {
public:
    Launcher() {
        int ends[2];
        if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return;  // (commands inherit neither end)
        if ((pid_ = ::fork()) < 0) {
            ::close(ends[0]);
            ::close(ends[1]);
            return;
        }
        if (pid_ == 0) {
            ::close(ends[0]);
            serve(ends[1]);
            ::_exit(0);
        }
        ::close(ends[1]);
        fd_ = ends[0];
    }
    ~Launcher() {
        if (fd_ < 0) return;
        ::close(fd_);  // the launcher reads the end and exits
        ::waitpid(pid_, nullptr, 0);
    }

    Exit run(const std::string& line) {
        const std::lock_guard<std::mutex> one_at_a_time(mutex_);
        const std::uint64_t size = line.size();
        Exit done{};
        if (fd_ >= 0 && write_all(fd_, &size, sizeof size) && write_all(fd_, line.data(), line.size()) &&
            read_all(fd_, &done, sizeof done))
            return done;
        return run_shell(line);  // no launcher: from here
    }

private:
    static void serve(int fd) {
        for (std::uint64_t size = 0; read_all(fd, &size, sizeof size);) {
            std::string line(size, '\0');
            if (!read_all(fd, line.data(), line.size())) return;
            const Exit done = run_shell(line);
            if (!write_all(fd, &done, sizeof done)) return;
        }
    }

    pid_t pid_ = -1;
    int fd_ = -1;
    std::mutex mutex_;
};

Launcher launcher;  // (static initialization: before main, before any test loads a driver)

}  // namespace

CommandResult run_command(const std::string& command) {
    TempDir dir;
    const fs::path out = dir / "stdout", err = dir / "stderr";
    const Exit done = launcher.run(command + " >'" + out.string() + "' 2>'" + err.string() + "' </dev/null");
    if (done.code < 0) throw std::runtime_error("cannot run /bin/sh for: " + command);
    return {done.code, read_file(out), read_file(err), done.peak_rss_kib};
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

std::vector<float> uniform_floats(std::size_t n, unsigned seed, float lo, float hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
}

std::uint64_t resident_bytes() {
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0, resident = 0;
    if (!(statm >> pages >> resident)) return 0;
    return resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace llamacl::test
