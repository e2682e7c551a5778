#include "llamacl/atomic_file.hpp"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <utility>

#include "llamacl/error.hpp"

namespace llamacl {

namespace {

// The files being written, for the signal handlers, which may run on any thread at any moment and so read
// only this fixed table: a slot is published (state 2) after its path is written, and its path is
// published before the file is created and retired (state 0) only once the file is renamed or removed.
struct Unfinished {
    std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live
    char path[PATH_MAX] = {};
};
constexpr int kSlots = 4;  // quantize writes one file, bench and check one plot
Unfinished unfinished[kSlots];

constexpr int kFatalSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGXFSZ};
constexpr int kNameAttempts = 100;  // names tried before giving up on a directory full of ours

void on_fatal_signal(int signal) {
    remove_unfinished_outputs();
    ::signal(signal, SIG_DFL);
    ::raise(signal);  // blocked while the handler runs: ends the process as the default action when it returns
}

// Only over the default action: a signal the user had ignored (nohup's SIGHUP) stays ignored.
void install_handlers() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (const int signal : kFatalSignals) {
            struct sigaction current {};
            if (::sigaction(signal, nullptr, &current) != 0 || (current.sa_flags & SA_SIGINFO) ||
                current.sa_handler != SIG_DFL)
                continue;
            struct sigaction action {};
            action.sa_handler = on_fatal_signal;
            sigemptyset(&action.sa_mask);
            ::sigaction(signal, &action, nullptr);
        }
    });
}

int claim_slot() {
    for (int i = 0; i < kSlots; ++i) {
        int free = 0;
        if (unfinished[i].state.compare_exchange_strong(free, 1)) return i;
    }
    throw std::logic_error("AtomicFile: more outputs written at once than the signal handlers' table holds");
}

void publish(int slot, const std::string& path) {
    Unfinished& u = unfinished[slot];
    u.state.store(1, std::memory_order_release);
    std::memcpy(u.path, path.c_str(), path.size() + 1);
    u.state.store(2, std::memory_order_release);
}

std::string random_suffix(std::random_device& random) {
    static constexpr char kLetters[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    std::uniform_int_distribution<int> pick(0, sizeof kLetters - 2);
    std::string suffix(6, ' ');
    for (char& c : suffix) c = kLetters[pick(random)];
    return suffix;
}

std::string file_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

}  // namespace

void remove_unfinished_outputs() noexcept {
    for (const Unfinished& u : unfinished)
        if (u.state.load(std::memory_order_acquire) == 2) ::unlink(u.path);
}

AtomicFile::AtomicFile(std::string path, const std::vector<InputFile>& inputs, std::string owner)
    : path_(std::move(path)), owner_(std::move(owner)) {
    const auto cannot_create = [&](int error) {
        return Error(owner_ + ": cannot create " + path_ + ": " + std::strerror(error) +
                     (error == ENAMETOOLONG ? "; give a shorter path" : "; give a path in a writable directory"));
    };
    // The rename would replace whatever is at the path: never an input, a directory, FIFO or device.
    struct stat target {};
    if (::stat(path_.c_str(), &target) == 0) {
        if (!S_ISREG(target.st_mode))
            throw Error(owner_ + ": cannot write " + path_ + ": it exists and is not a regular file (" +
                        file_kind(target.st_mode) + "); give the path of a file to write");
        for (const InputFile& in : inputs) {
            struct stat input {};
            if (::stat(in.path.c_str(), &input) == 0 && input.st_dev == target.st_dev && input.st_ino == target.st_ino)
                throw Error(owner_ + ": cannot write " + path_ + ": it is " + in.role +
                            (in.path == path_ ? "" : " (" + in.path + ")") + "; give another output path");
        }
    } else if (errno != ENOENT) {
        throw cannot_create(errno);
    }

    const std::size_t slash = path_.rfind('/');
    const std::string prefix = (slash == std::string::npos ? "" : path_.substr(0, slash + 1)) + ".llamacl-";
    if (prefix.size() + 6 >= PATH_MAX) throw cannot_create(ENAMETOOLONG);
    install_handlers();
    slot_ = claim_slot();
    // A new file of its own (O_EXCL): never an existing file, nor what a link there points to.
    std::random_device random;
    int error = EEXIST;
    for (int attempt = 0; attempt < kNameAttempts && error == EEXIST; ++attempt) {
        aside_ = prefix + random_suffix(random);
        publish(slot_, aside_);
        fd_ = ::open(aside_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        error = fd_ >= 0 ? 0 : errno;
    }
    if (fd_ < 0) {
        unfinished[std::exchange(slot_, -1)].state.store(0, std::memory_order_release);
        throw cannot_create(error);
    }
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (slot_ >= 0) {
        ::unlink(aside_.c_str());
        unfinished[slot_].state.store(0, std::memory_order_release);
    }
}

void AtomicFile::fail_write(int error) const {
    throw Error(owner_ + ": cannot write " + path_ + ": " + std::strerror(error) +
                "; give a path in a writable directory with room");
}

void AtomicFile::write(const void* data, std::size_t bytes) {
    const auto* at = static_cast<const char*>(data);
    while (bytes > 0) {
        const ssize_t written = ::write(fd_, at, bytes);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) fail_write(written < 0 ? errno : EIO);
        at += written;
        bytes -= static_cast<std::size_t>(written);
    }
}

void AtomicFile::commit() {
    if (::fsync(fd_) != 0) fail_write(errno);
    if (::close(std::exchange(fd_, -1)) != 0) fail_write(errno);
    if (::rename(aside_.c_str(), path_.c_str()) != 0) fail_write(errno);
    unfinished[std::exchange(slot_, -1)].state.store(0, std::memory_order_release);
}

}  // namespace llamacl
