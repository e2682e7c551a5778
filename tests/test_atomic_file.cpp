// AtomicFile: an output written aside and renamed into place. It never replaces an input or anything but
// a regular file, leaves an earlier file intact when a write fails, and leaves no file of its own behind,
// whether the write fails, the process is signalled or the mapping guard ends it.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "llamacl/atomic_file.hpp"
#include "llamacl/error.hpp"
#include "llamacl/mapped_file.hpp"
#include "support.hpp"

using namespace llamacl;
using namespace llamacl::test;

namespace {

// The names in `dir`, sorted.
std::vector<std::string> names_in(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// The message of the Error that `f` throws, "" when it throws none.
template <typename F>
std::string error_of(F f) {
    try {
        f();
    } catch (const Error& e) {
        EXPECT_EQ(e.exit_code(), 1);
        return e.what();
    }
    return "";
}

TEST(AtomicFile, WritesAsideAndRenamesOverTheOutput) {
    TempDir dir;
    const auto out = dir / "out.txt";
    std::ofstream(out) << "earlier";
    {
        AtomicFile file(out.string(), {}, "--plot");
        file.write("new ");
        EXPECT_EQ(read_file(out), "earlier") << "the output is replaced only by the rename";
        const std::vector<std::string> names = names_in(dir.path());
        ASSERT_EQ(names.size(), 2u);
        EXPECT_EQ(names[0].rfind(".llamacl-", 0), 0u) << names[0];
        EXPECT_EQ(names[0].size(), std::string(".llamacl-XXXXXX").size()) << names[0];
        file.write(std::string("content"));
        file.commit();
    }
    EXPECT_EQ(read_file(out), "new content");
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.txt"});
}

TEST(AtomicFile, TheFileHasTheModeCreatWouldGive) {
    TempDir dir;
    const mode_t mask = ::umask(022);
    {
        AtomicFile file((dir / "m").string(), {}, "quantize");
        file.commit();
    }
    ::umask(mask);
    struct stat st {};
    ASSERT_EQ(::stat((dir / "m").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(AtomicFile, AnUnfinishedFileIsRemovedAndTheEarlierOneKept) {
    TempDir dir;
    const auto out = dir / "out.txt";
    std::ofstream(out) << "earlier";
    {
        AtomicFile file(out.string(), {}, "--plot");
        file.write("half");
    }
    EXPECT_EQ(read_file(out), "earlier");
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"out.txt"});
}

// A write that fails (a full disk; here a file size limit, with SIGXFSZ ignored so that write returns
// EFBIG) is an error naming the path, and the earlier file is left as it was.
TEST(AtomicFile, AFailedWriteLeavesTheEarlierFileIntact) {
    TempDir dir;
    const auto out = dir / "out.txt";
    std::ofstream(out) << "earlier";
    AtomicFile file(out.string(), {}, "--plot");
    rlimit before {};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
    const rlimit small{4096, before.rlim_max};
    struct sigaction ignore {}, previous {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(SIGXFSZ, &ignore, &previous);
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
    const std::string message = error_of([&] { file.write(std::string(8192, 'x')); });
    ::setrlimit(RLIMIT_FSIZE, &before);
    ::sigaction(SIGXFSZ, &previous, nullptr);
    EXPECT_EQ(message, "--plot: cannot write " + out.string() + ": " + std::strerror(EFBIG) +
                           "; give a path in a writable directory with room");
    EXPECT_EQ(read_file(out), "earlier");
}

TEST(AtomicFile, AnInputIsNeverTheOutputByAnyName) {
    TempDir dir;
    const auto model = dir / "model.bin", tokenizer = dir / "tok.bin";
    std::ofstream(model) << "weights";
    std::ofstream(tokenizer) << "pieces";
    std::filesystem::create_symlink(model, dir / "link.bin");
    std::filesystem::create_hard_link(tokenizer, dir / "hard.bin");
    const std::vector<InputFile> inputs = {{model.string(), "the checkpoint"}, {tokenizer.string(), "the tokenizer"}};
    EXPECT_EQ(error_of([&] { AtomicFile((dir / "model.bin").string(), inputs, "--plot"); }),
              "--plot: cannot write " + model.string() + ": it is the checkpoint; give another output path");
    EXPECT_EQ(error_of([&] { AtomicFile((dir / "link.bin").string(), inputs, "--plot"); }),
              "--plot: cannot write " + (dir / "link.bin").string() + ": it is the checkpoint (" + model.string() +
                  "); give another output path");
    EXPECT_EQ(error_of([&] { AtomicFile((dir / "hard.bin").string(), inputs, "--plot"); }),
              "--plot: cannot write " + (dir / "hard.bin").string() + ": it is the tokenizer (" + tokenizer.string() +
                  "); give another output path");
    EXPECT_EQ(read_file(model), "weights");
    EXPECT_EQ(read_file(tokenizer), "pieces");
    EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"hard.bin", "link.bin", "model.bin", "tok.bin"}));
}

// A FIFO would hang the write until a reader came, and the rename would replace a directory or device.
TEST(AtomicFile, OnlyARegularFileOrNothingIsReplaced) {
    TempDir dir;
    const auto fifo = dir / "fifo";
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::filesystem::create_directory(dir / "sub");
    for (const auto& [path, kind] : {std::pair{fifo.string(), "a FIFO"},
                                     {(dir / "sub").string(), "a directory"},
                                     {std::string("/dev/null"), "a character device"}})
        EXPECT_EQ(error_of([&] { AtomicFile(path, {}, "quantize"); }),
                  "quantize: cannot write " + path + ": it exists and is not a regular file (" + kind +
                      "); give the path of a file to write");
    EXPECT_TRUE(std::filesystem::is_fifo(fifo));
    EXPECT_EQ(names_in(dir.path()), (std::vector<std::string>{"fifo", "sub"}));
}

TEST(AtomicFile, ADirectoryThatTakesNoFileIsRefusedAtOnce) {
    TempDir dir;
    const std::string path = (dir / "missing" / "out.svg").string();
    EXPECT_EQ(error_of([&] { AtomicFile(path, {}, "--plot"); }),
              "--plot: cannot create " + path + ": " + std::strerror(ENOENT) + "; give a path in a writable directory");
}

// The file written aside has a short name of its own: an output name of NAME_MAX bytes still works.
TEST(AtomicFile, AnOutputNameOfNameMaxBytesWorks) {
    TempDir dir;
    const auto out = dir / std::string(NAME_MAX, 'n');
    AtomicFile file(out.string(), {}, "quantize");
    file.write("x");
    file.commit();
    EXPECT_EQ(read_file(out), "x");
}

TEST(AtomicFile, RemoveUnfinishedOutputsUnlinksWhatIsBeingWritten) {
    TempDir dir;
    AtomicFile first((dir / "a").string(), {}, "quantize");
    AtomicFile second((dir / "b").string(), {}, "--plot");
    EXPECT_EQ(names_in(dir.path()).size(), 2u);
    remove_unfinished_outputs();
    EXPECT_TRUE(names_in(dir.path()).empty());
}

// A fatal signal removes the file being written, then ends the process as the signal would have.
void signalled_while_writing(const std::filesystem::path& dir, int signal) {
    AtomicFile file((dir / "out").string(), {}, "quantize");
    file.write("partial");
    ::raise(signal);
}

TEST(AtomicFileDeathTest, AFatalSignalRemovesTheFileBeingWritten) {
    for (const int signal : {SIGINT, SIGTERM, SIGHUP}) {
        TempDir dir;
        EXPECT_EXIT(signalled_while_writing(dir.path(), signal), ::testing::KilledBySignal(signal), "");
        EXPECT_TRUE(names_in(dir.path()).empty()) << strsignal(signal);
    }
}

// The mapping guard's exit on SIGBUS (an input truncated while it is read) removes it too.
void input_truncated_while_writing(const std::filesystem::path& dir) {
    const std::string input = (dir / "input").string();
    std::ofstream(input, std::ios::binary) << std::string(65536, 'x');
    const int fd = ::open(input.c_str(), O_RDONLY);
    const MappedFile mapped(fd, 65536, input);
    ::close(fd);
    AtomicFile file((dir / "out").string(), {{input, "the input checkpoint"}}, "quantize");
    file.write("partial");
    ::truncate(input.c_str(), 100);
    volatile std::byte last = mapped.data()[65535];
    (void)last;
}

TEST(AtomicFileDeathTest, TheMappingGuardsExitRemovesTheFileBeingWritten) {
    TempDir dir;
    EXPECT_EXIT(input_truncated_while_writing(dir.path()), ::testing::ExitedWithCode(1),
                "^llama-cl: .*input: the file shrank while in use");
    EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"input"});
}

}  // namespace
