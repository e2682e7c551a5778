#include "llamacl/program_cache.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

namespace llamacl {

namespace {

namespace fs = std::filesystem;

// FNV-1a: stable across runs and builds, which std::hash does not promise. Two bases give two independent
// hashes of a key: one names its file, the other is checked inside.
constexpr std::uint64_t kNameBasis = 14695981039346656037ull, kCheckBasis = 1099511628211ull * 31;

std::uint64_t fnv1a(const unsigned char* data, std::size_t size, std::uint64_t basis = kNameBasis) {
    std::uint64_t h = basis;
    for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
    return h;
}

std::uint64_t fnv1a(const std::string& s, std::uint64_t basis) {
    return fnv1a(reinterpret_cast<const unsigned char*>(s.data()), s.size(), basis);
}

// A driver runs what it loads from here: only a directory of this user's that no one else can write to.
std::optional<fs::path> cache_dir() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    if (!(xdg && *xdg) && !(home && *home)) return std::nullopt;
    const fs::path dir = xdg && *xdg ? fs::path(xdg) / "llama-cl" : fs::path(home) / ".cache" / "llama-cl";
    std::error_code ec;
    fs::create_directories(dir, ec);
    struct stat st {};
    if (::lstat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::getuid() || (st.st_mode & 022) != 0)
        return std::nullopt;
    return dir;
}

// An entry: one hash of the key names the file; inside, the other, the binary's hash and size, the binary.
struct Header {
    std::uint64_t key_hash = 0, binary_hash = 0, binary_size = 0;
};

std::string entry_name(const std::string& key) {
    char name[32];
    std::snprintf(name, sizeof name, "%016llx.bin", static_cast<unsigned long long>(fnv1a(key, kNameBasis)));
    return name;
}

}  // namespace

std::vector<unsigned char> cached_program_binary(const std::string& key) {
    const std::optional<fs::path> dir = cache_dir();
    if (!dir) return {};
    std::ifstream in(*dir / entry_name(key), std::ios::binary);
    Header h;
    if (!in.read(reinterpret_cast<char*>(&h), sizeof h) || h.key_hash != fnv1a(key, kCheckBasis)) return {};
    std::vector<unsigned char> binary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (binary.size() != h.binary_size || fnv1a(binary.data(), binary.size()) != h.binary_hash) return {};
    return binary;
}

void cache_program_binary(const std::string& key, const std::vector<unsigned char>& binary) {
    const std::optional<fs::path> dir = cache_dir();
    if (!dir || binary.empty()) return;
    const fs::path entry = *dir / entry_name(key);
    const fs::path temporary = entry.string() + "." + std::to_string(::getpid()) + ".tmp";
    const Header h{fnv1a(key, kCheckBasis), fnv1a(binary.data(), binary.size()), binary.size()};
    {
        std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(&h), sizeof h);
        out.write(reinterpret_cast<const char*>(binary.data()), static_cast<std::streamsize>(binary.size()));
        if (!out.flush()) {
            std::error_code ec;
            fs::remove(temporary, ec);
            return;
        }
    }
    std::error_code ec;
    fs::rename(temporary, entry, ec);  // atomic: readers see the old entry or the new one
    if (ec) fs::remove(temporary, ec);
}

}  // namespace llamacl
