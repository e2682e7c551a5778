// What llama-cl writes besides its report: quantize's checkpoint and the --plot of bench and check never
// replace an input or a special file, a measurement is never lost to its plot, and nothing of a write that
// did not finish is left behind, whatever ended it. And messages that stay one line saying what to do.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "llamacl/checkpoint.hpp"
#include "models.hpp"
#include "support.hpp"

extern char** environ;

using namespace llamacl;
using namespace llamacl::test;

namespace {

namespace fs = std::filesystem;

constexpr auto kPatience = std::chrono::seconds(120);  // the longest a test waits for what it polls

std::vector<std::string> names_in(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// A file in `dir` other than those named in `known`: what a writer in progress has made.
bool has_new_file(const fs::path& dir, const std::vector<std::string>& known) {
    for (const std::string& name : names_in(dir))
        if (std::find(known.begin(), known.end(), name) == known.end()) return true;
    return false;
}

long count_lines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

// `llama-cl ARGS` started in the background, stdout and stderr into files of a directory of its own, with
// the signals the tests send at their default actions (a test runner under nohup ignores SIGHUP).
class Background {
public:
    explicit Background(const std::string& args, const std::string& env = "") {
        const std::string line = env + " exec '" + std::string(LLAMACL_BINARY) + "' " + args + " >" +
                                 quote((logs_ / "out").string()) + " 2>" + quote((logs_ / "err").string());
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t defaults, none;
        sigemptyset(&defaults);
        for (const int signal : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&defaults, signal);
        sigemptyset(&none);
        posix_spawnattr_setsigdefault(&attr, &defaults);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
        const char* argv[] = {"sh", "-c", line.c_str(), nullptr};
        if (::posix_spawn(&pid_, "/bin/sh", nullptr, &attr, const_cast<char* const*>(argv), environ) != 0) pid_ = -1;
        posix_spawnattr_destroy(&attr);
    }
    ~Background() {
        if (running()) ::kill(pid_, SIGKILL);
        wait();
    }

    bool running() {
        if (pid_ > 0 && !done_ && ::waitpid(pid_, &status_, WNOHANG) == pid_) done_ = true;
        return pid_ > 0 && !done_;
    }
    // Polls `ready` until it holds (true), or the command ended or kPatience passed first (false).
    bool wait_until(const std::function<bool()>& ready) {
        for (const auto start = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - start < kPatience;) {
            if (ready()) return true;
            if (!running()) return ready();
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return false;
    }
    void signal(int signal) const { ::kill(pid_, signal); }
    // The wait status once it has ended.
    int wait() {
        while (pid_ > 0 && !done_) {
            if (::waitpid(pid_, &status_, 0) == pid_ || errno != EINTR) done_ = true;
        }
        return status_;
    }
    std::string out() const { return read_file(logs_ / "out"); }
    std::string err() const { return read_file(logs_ / "err"); }

private:
    TempDir logs_;
    pid_t pid_ = -1;
    bool done_ = false;
    int status_ = 0;
};

// An fp32 llama2.c version-1 file of zeros whose weights take a while to quantize (about 1.2 GB), sparse
// so that it costs no disk.
fs::path write_large_sparse_model(const TempDir& dir) {
    const Config c{1024, 4096, 16, 16, 16, 32000, 256, true};
    const fs::path path = dir / "large.bin";
    char header[256] = {};
    const std::uint32_t magic = 0x616b3432;
    const std::int32_t fields[8] = {1, c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size, c.seq_len};
    std::memcpy(header, &magic, 4);
    std::memcpy(header + 4, fields, sizeof fields);
    header[36] = 1;  // shared classifier
    std::ofstream(path, std::ios::binary).write(header, sizeof header);
    fs::resize_file(path, sizeof header + ModelSize(c).weight_bytes());
    return path;
}

// ---- --plot never replaces an input or a special file -----------------------------------------------

TEST(OutputFiles, BenchPlotNeverReplacesTheCheckpoint) {
    TempDir dir;
    const fs::path model = write_model(dir, small_config());
    const std::string before = read_file(model);
    fs::create_symlink(model, dir / "link.bin");
    for (const fs::path& plot : {model, dir / "link.bin"}) {
        const CommandResult r = run_llama_cl("bench " + quote(model.string()) + " -n 2 --runs 1 --probe-mib 4 --profile --plot " +
                                             quote(plot.string()));
        EXPECT_EQ(r.exit_code, 1) << plot;
        EXPECT_EQ(r.out, "") << "refused before measuring";
        EXPECT_EQ(r.err, "llama-cl: --plot: cannot write " + plot.string() + ": it is the checkpoint" +
                             (plot == model ? "" : " (" + model.string() + ")") + "; give another output path\n");
    }
    EXPECT_EQ(read_file(model), before);
    EXPECT_TRUE(fs::is_symlink(dir / "link.bin"));
}

TEST(OutputFiles, CheckPlotNeverReplacesTheCheckpointOrTheTokenizer) {
    TempDir dir;
    const fs::path model = write_model(dir, small_config()), tokenizer = dir / "tok.bin";
    const std::string model_bytes = read_file(model), tokenizer_bytes = read_file(tokenizer);
    fs::create_symlink(tokenizer, dir / "link.bin");
    for (const auto& [plot, role] : {std::pair{model, std::string("the checkpoint")},
                                     {tokenizer, std::string("the tokenizer")},
                                     {dir / "link.bin", "the tokenizer (" + tokenizer.string() + ")"}}) {
        const CommandResult r = run_llama_cl("check " + quote(model.string()) + " -z " + quote(tokenizer.string()) +
                                             " --plot " + quote(plot.string()));
        EXPECT_EQ(r.exit_code, 1) << plot;
        EXPECT_EQ(r.out, "") << "refused before the ladder";
        EXPECT_EQ(r.err, "llama-cl: --plot: cannot write " + plot.string() + ": it is " + role +
                             "; give another output path\n");
    }
    EXPECT_EQ(read_file(model), model_bytes);
    EXPECT_EQ(read_file(tokenizer), tokenizer_bytes);
}

// Opening a FIFO to write waits for a reader: the path is refused instead (a bounded run either way).
TEST(OutputFiles, APlotOnAFifoIsRefusedWithoutWaiting) {
    TempDir dir;
    const fs::path fifo = dir / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const std::string plot = " --plot " + quote(fifo.string());
    for (const std::string& command : {"bench --synthetic tiny -n 2 --runs 1 --probe-mib 4 --profile" + plot,
                                       "check --weights f32" + plot}) {
        const CommandResult r = run_command("timeout 60 '" + std::string(LLAMACL_BINARY) + "' " + command);
        EXPECT_EQ(r.exit_code, 1) << command;
        EXPECT_EQ(r.out, "") << command;
        EXPECT_EQ(r.err, "llama-cl: --plot: cannot write " + fifo.string() +
                             ": it exists and is not a regular file (a FIFO); give the path of a file to write\n");
    }
    EXPECT_TRUE(fs::is_fifo(fifo));
}

// ---- bench keeps its measurement --------------------------------------------------------------------

// A plot path that cannot be written is found before anything runs: here before a device plan that would
// fail on its own.
TEST(OutputFiles, BenchChecksThePlotPathBeforeMeasuring) {
    const CommandResult r = run_llama_cl("bench --synthetic tiny --max-device-memory 0.01 --profile --plot /nonexistent/dir/r.svg");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, "llama-cl: --plot: cannot create /nonexistent/dir/r.svg: " + std::string(std::strerror(ENOENT)) +
                         "; give a path in a writable directory\n");
}

// A plot that fails at the end (here a directory made at its path while the command runs, so that the
// rename fails) fails the command after the report is printed. Nothing of the plot is left.
void expect_report_kept(const std::string& command, const std::string& report_part) {
    TempDir dir;
    const fs::path plot = dir / "r.svg";
    Background run(command + " --plot " + quote(plot.string()));
    ASSERT_TRUE(run.wait_until([&] { return has_new_file(dir.path(), {}); }))
        << "no file written aside before the run: " << run.err();
    fs::create_directory(plot);
    const int status = run.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status << run.err();
    EXPECT_NE(run.out().find(report_part), std::string::npos) << run.out();
    EXPECT_EQ(run.err(), "llama-cl: --plot: cannot write " + plot.string() + ": " + std::strerror(EISDIR) +
                             "; give a path in a writable directory with room\n");
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"r.svg"});
}

TEST(OutputFiles, BenchPrintsItsReportBeforeThePlot) {
    expect_report_kept("bench --synthetic tiny -n 4 --runs 2 --probe-mib 4 --profile --json", "\"decode_tok_s\"");
}

TEST(OutputFiles, CheckPrintsItsReportBeforeThePlot) {
    expect_report_kept("check --weights f32", "check: passed: ");
}

// ---- quantize leaves nothing behind ------------------------------------------------------------------

TEST(OutputFiles, QuantizeLeavesNothingBehindWhenSignalled) {
    TempDir dir;
    const fs::path model = write_large_sparse_model(dir);
    ASSERT_NO_THROW(Checkpoint::open(model.string()));
    for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
        Background run("quantize " + quote(model.string()) + " " + quote((dir / "q.bin").string()));
        ASSERT_TRUE(run.wait_until([&] { return has_new_file(dir.path(), {"large.bin"}); }))
            << "no file written aside: " << run.err();
        run.signal(signal);
        const int status = run.wait();
        EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal) << strsignal(signal) << ": status " << status;
        EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"large.bin"}) << strsignal(signal);
    }
}

// The input is memory-mapped: cut short while quantize reads it, the mapping guard ends the process, and
// the file being written goes with it.
TEST(OutputFiles, QuantizeLeavesNothingBehindWhenItsInputIsTruncated) {
    TempDir dir;
    const fs::path model = write_large_sparse_model(dir);
    Background run("quantize " + quote(model.string()) + " " + quote((dir / "q.bin").string()));
    ASSERT_TRUE(run.wait_until([&] { return has_new_file(dir.path(), {"large.bin"}); }))
        << "no file written aside: " << run.err();
    fs::resize_file(model, 256);
    const int status = run.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
    EXPECT_EQ(run.err(), "llama-cl: " + model.string() +
                             ": the file shrank while in use (truncated or overwritten); leave it unchanged while "
                             "llama-cl runs, and run again\n");
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"large.bin"});
}

// Any name the file system takes is an output quantize takes: its working file's name is short.
TEST(OutputFiles, QuantizeWritesAnOutputNameOfNameMaxBytes) {
    TempDir dir;
    const fs::path model = write_model(dir, small_config(), 1);
    for (const std::size_t length : {250, NAME_MAX}) {
        const fs::path out = dir / std::string(length, 'q');
        const CommandResult r = run_llama_cl("quantize " + quote(model.string()) + " " + quote(out.string()));
        EXPECT_EQ(r.exit_code, 0) << r.err;
        EXPECT_TRUE(fs::is_regular_file(out)) << length;
        EXPECT_EQ(names_in(dir.path()).size(), 3u) << "model.bin, tok.bin and the output";
        fs::remove(out);
    }
}

// ---- messages ---------------------------------------------------------------------------------------

// CLI11 says "-z: 1 required TEXT:TEXT missing" of an option at the end of the line without its value.
TEST(Messages, AnOptionWithoutItsValueSaysWhatItTakes) {
    TempDir dir;
    const fs::path model = write_model(dir, small_config());
    for (const std::string& command : {"generate " + quote(model.string()) + " -z", "check " + quote(model.string()) + " -z"}) {
        const CommandResult r = run_llama_cl(command);
        EXPECT_EQ(r.exit_code, 2) << command;
        EXPECT_EQ(r.err.rfind("llama-cl: -z: needs a value after it: tokenizer file", 0), 0u) << r.err;
        EXPECT_EQ(r.err.find("required"), std::string::npos) << r.err;
        EXPECT_EQ(count_lines(r.err), 1) << r.err;
    }
    const CommandResult n = run_llama_cl("generate " + quote(model.string()) + " -n");
    EXPECT_EQ(n.err.rfind("llama-cl: -n: needs a value after it: ", 0), 0u) << n.err;
}

// bench measures OpenCL devices only: its remedies never send the user to a --backend it does not have.
TEST(Messages, BenchOffersNoBackendItLacks) {
    TempDir vendors;  // ocl-icd reads its drivers from OCL_ICD_VENDORS: an empty directory is a machine without
    const std::string env = "OCL_ICD_VENDORS=" + quote(vendors.path().string()) + " ";
    const CommandResult devices = run_command(env + "'" + std::string(LLAMACL_BINARY) + "' devices");
    if (devices.exit_code == 0) GTEST_SKIP() << "this OpenCL ICD loader ignores OCL_ICD_VENDORS";
    const CommandResult r = run_command(env + "'" + std::string(LLAMACL_BINARY) + "' bench --synthetic tiny");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "llama-cl: no OpenCL platform found: the ICD loader (libOpenCL) found no driver; install one (e.g. "
                     "apt install pocl-opencl-icd for CPUs), or time the CPU reference with generate --backend cpu, as "
                     "bench measures OpenCL devices only\n");
}

// A failed build is one line that quotes the compiler's first error: nothing a compiler prints on the
// process's stderr itself (PoCL's clang: "N errors generated.") comes before or after it.
TEST(Messages, AFailedKernelBuildIsOneLineWithTheFirstError) {
    TempDir dir;
    const fs::path model = write_model(dir, small_config());
    // The GPU shape's GEMM checks its tunable's value (#error).
    const CommandResult r = run_command("LLAMACL_BUILD_OPTIONS=-DGEMM_TK=24 '" + std::string(LLAMACL_BINARY) +
                                        "' generate " + quote(model.string()) + " -z " + quote((dir / "tok.bin").string()) +
                                        " --backend opencl --work-shape gpu -n 4");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("llama-cl: kernel build failed on ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find("GEMM_TK must be 16 or 32; check LLAMACL_BUILD_OPTIONS"), std::string::npos) << r.err;
}

}  // namespace
