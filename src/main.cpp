#include <unistd.h>

#include <csignal>
#include <cstdio>

#include "llamacl/cli.hpp"

int main(int argc, char** argv) {
    // A reader that goes away (`| head`) is a failed write with EPIPE, which ends the command quietly
    // (error.hpp's ReaderGone), not a death by SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    // Output to a file or pipe is held until a flush (generate flushes each piece) or exit, up to 1 MiB: a
    // write that fails inside stdio's own buffering leaves no errno, the final flush's failure does.
    static char out_buffer[1 << 20];
    if (!::isatty(STDOUT_FILENO)) std::setvbuf(stdout, out_buffer, _IOFBF, sizeof out_buffer);
    return llamacl::run_cli(argc, argv);
}
