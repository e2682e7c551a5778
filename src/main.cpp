#include <csignal>

#include "llamacl/cli.hpp"

int main(int argc, char** argv) {
    // A reader that goes away (`| head`) is a failed write, reported as one line and exit 1 like a full
    // disk, not a death by SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    return llamacl::run_cli(argc, argv);
}
