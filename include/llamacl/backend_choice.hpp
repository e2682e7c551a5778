#pragma once
// --backend auto's choice where the best OpenCL device is itself a CPU: the CPU reference or the device,
// whichever ran this model's work faster on this machine. Each path is measured once, for a few positions,
// and the rates are kept in a cache file, so that later runs choose at no cost.
#include <filesystem>
#include <optional>
#include <string>

#include "llamacl/device.hpp"
#include "llamacl/forward.hpp"
#include "llamacl/model_config.hpp"

namespace llamacl {

// The work a run is made of: a position at a time (generate, chat), or windows of positions (perplexity).
enum class Work { decode, prompt };

// Positions per second each path ran.
struct PathRates {
    double reference = 0, device = 0;
    bool device_faster() const { return device > reference; }
};

// What the rates depend on, but for the build: the device and its driver, the model's shape and formats,
// the work, and the CPUs the reference may use.
std::string rate_key(const DeviceInfo& device, const Config& config, Work work);

// Measured rates by key, of one build of llama-cl (its executable's size and time), in one JSON file. A
// file that is missing, unreadable, malformed or of another build holds none; a write that fails loses the
// measurement alone. Writes go through a temporary file and a rename; another build's rates are dropped.
class RateCache {
public:
    explicit RateCache(std::filesystem::path file) : file_(std::move(file)) {}
    // $XDG_CACHE_HOME/llama-cl/backend-rates.json, else under $HOME/.cache; none (an empty path) without either.
    static RateCache of_user();
    std::optional<PathRates> find(const std::string& key) const;
    // Adds or replaces `key`'s rates; false where the file could not be written.
    bool store(const std::string& key, const PathRates& rates) const;
    const std::filesystem::path& file() const { return file_; }

private:
    std::filesystem::path file_;
};

// The rates the device's model and the reference's run `work` at, each sized for `positions` positions:
// one untimed pass each (first launches, the weights' first reads), then four rounds of a twentieth of a
// second on each in turn, the best round's rate kept (another process's load only ever slows a round). A
// pass is a token at the next position (wrapping at `positions`), or a window of up to 64 positions and
// their logits (Work::prompt). Passes write the KV cache at positions a run rewrites before it reads them.
PathRates measure_rates(Forward& device, Forward& reference, Work work, int positions);

}  // namespace llamacl
