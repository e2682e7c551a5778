#include "llamacl/cli.hpp"

int main(int argc, char** argv) { return llamacl::run_cli(argc, argv); }
