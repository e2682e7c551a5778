#include "llamacl/build_options.hpp"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <sstream>

#include "llamacl/error.hpp"

namespace llamacl {

namespace {

// The macro a -D or -U option names: "-DNAME=VALUE", "-DNAME", or "-D" followed by "NAME=VALUE".
std::string macro_name(const std::string& definition) { return definition.substr(0, definition.find('=')); }

}  // namespace

std::string describe_kernel_tunables() {
    std::string text;
    for (const KernelTunable& t : kKernelTunables) text += (text.empty() ? "" : "; ") + std::string(t.name) + " (" + t.values + ")";
    return text;
}

std::string user_build_options() {
    const char* value = std::getenv("LLAMACL_BUILD_OPTIONS");
    if (!value) return {};
    std::istringstream words(value);
    for (std::string word; words >> word;) {
        if (word.rfind("-D", 0) != 0 && word.rfind("-U", 0) != 0) continue;
        std::string definition = word.substr(2);
        if (definition.empty()) words >> definition;
        const std::string name = macro_name(definition);
        if (std::none_of(std::begin(kKernelTunables), std::end(kKernelTunables),
                         [&](const KernelTunable& t) { return name == t.name; }))
            throw usage_error("LLAMACL_BUILD_OPTIONS: " + word.substr(0, 2) + definition + ": " +
                              (name.empty() ? std::string("a macro without a name") : name) +
                              " is not a kernel tunable (the other macros are llama-cl's own, set from the device "
                              "and the model); remove it, or set one of: " + describe_kernel_tunables());
    }
    return value;
}

}  // namespace llamacl
