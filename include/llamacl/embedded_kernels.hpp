#pragma once
// The OpenCL C sources in kernels/, compiled into the binary at build time (cmake/embed_kernels.cmake), in
// program order (the list in CMakeLists.txt).
#include <string_view>
#include <vector>

namespace llamacl {

struct EmbeddedKernel {
    std::string_view file;    // e.g. "matvec.cl"
    std::string_view source;  // the file's text
};

const std::vector<EmbeddedKernel>& embedded_kernels();

}  // namespace llamacl
