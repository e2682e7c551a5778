// MappedFile's guard: a read past the end of a file that shrank while mapped ends the process with one
// line naming the file, whichever handler the fault reaches first.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>

#include "llamacl/device.hpp"
#include "llamacl/mapped_file.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

struct sigaction guard_action {};

// What LLVM's crash recovery does with a fault outside a recovery context: put the previous handler
// back and raise the signal again.
void pass_fault_on(int signal, siginfo_t*, void*) {
    ::sigaction(signal, &guard_action, nullptr);
    ::raise(signal);
}

// A new file of `bytes` bytes at `path`, mapped (its descriptor closed: the mapping outlives it).
std::unique_ptr<MappedFile> map_new_file(const std::string& path, std::size_t bytes) {
    std::ofstream(path, std::ios::binary) << std::string(bytes, 'x');
    const int fd = ::open(path.c_str(), O_RDONLY);
    auto file = std::make_unique<MappedFile>(fd, bytes, path);
    ::close(fd);
    return file;
}

// Maps a file of 64 KiB, cuts it to 100 bytes, then reads its last page: SIGBUS.
void read_past_the_cut(const std::string& path, bool chained) {
    const auto file = map_new_file(path, 65536);
    if (chained) {
        struct sigaction chain {};
        chain.sa_sigaction = pass_fault_on;
        chain.sa_flags = SA_SIGINFO;
        sigemptyset(&chain.sa_mask);
        ::sigaction(SIGBUS, &chain, &guard_action);
    }
    ::truncate(path.c_str(), 100);
    volatile std::byte last = file->data()[65535];
    (void)last;
}

void foreign_handler(int) {}

}  // namespace

TEST(MappedFileGuard, AReadPastAShrunkFileEndsInOneLineNamingIt) {
    TempDir dir;
    const std::string path = (dir / "model.bin").string();
    EXPECT_EXIT(read_past_the_cut(path, false), ::testing::ExitedWithCode(1),
                "^llama-cl: .*model.bin: the file shrank while in use");
}

TEST(MappedFileGuard, AFaultAnotherHandlerPassesOnByRaiseEndsTheSameWay) {
    TempDir dir;
    const std::string path = (dir / "model.bin").string();
    EXPECT_EXIT(read_past_the_cut(path, true), ::testing::ExitedWithCode(1),
                "^llama-cl: .*model.bin: the file shrank while in use");
}

// LLVM, PoCL's compiler, puts its own SIGBUS handler in front while it builds, with SA_RESETHAND: while
// it runs SIGBUS is the default, and a second thread faulting on the shrunk file then dies without the
// message. Every program build puts the guard back in front.
TEST(MappedFileGuard, AProgramBuildPutsTheGuardBackInFront) {
    TempDir dir;
    const std::string path = (dir / "model.bin").string();
    const auto file = map_new_file(path, 4096);
    struct sigaction guard {};
    ::sigaction(SIGBUS, nullptr, &guard);
    ASSERT_NE(guard.sa_flags & SA_SIGINFO, 0);
    struct sigaction foreign {};
    foreign.sa_handler = foreign_handler;
    foreign.sa_flags = SA_RESETHAND | SA_NODEFER;
    sigemptyset(&foreign.sa_mask);
    ::sigaction(SIGBUS, &foreign, nullptr);
    Device::open("", "").build_program_from_source("__kernel void nothing(void) {}", "");
    struct sigaction now {};
    ::sigaction(SIGBUS, nullptr, &now);
    EXPECT_EQ(now.sa_sigaction, guard.sa_sigaction);
    EXPECT_EQ(now.sa_flags & SA_RESETHAND, 0);
}
