#include "llamacl/backend_choice.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>
#include <vector>

#include "llamacl/atomic_file.hpp"
#include "llamacl/host_memory.hpp"

namespace llamacl {

namespace {

// This executable's size and modification time: a rebuilt llama-cl measures again.
std::string this_build() {
    struct stat st {};
    if (::stat("/proc/self/exe", &st) != 0) return "unknown";
    return std::to_string(st.st_size) + "@" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec);
}

nlohmann::json read_json(const std::filesystem::path& file) {
    std::ifstream in(file);
    if (!in) return nlohmann::json::object();
    nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? j : nlohmann::json::object();
}

}  // namespace

std::string rate_key(const DeviceInfo& device, const Config& c, Work work) {
    std::ostringstream key;
    key << device.platform_name << " | " << device.name << " | " << device.driver_version << " | dim " << c.dim
        << " hidden " << c.hidden_dim << " layers " << c.n_layers << " heads " << c.n_heads << "/" << c.n_kv_heads
        << " vocab " << c.vocab_size << (c.shared_classifier ? " shared" : "") << " | " << c.weight_format.describe();
    if (c.table_format) key << ", table " << c.table_format->describe();
    key << (c.quant_rule == QuantRule::runq ? " runq" : " ggml") << " | "
        << (work == Work::decode ? "decode" : "prompt") << " | " << usable_cpus() << " CPUs";
    return key.str();
}

RateCache RateCache::of_user() {
    const char* xdg = std::getenv("XDG_CACHE_HOME");
    const char* home = std::getenv("HOME");
    const std::filesystem::path base = xdg && *xdg  ? std::filesystem::path(xdg)
                                       : home && *home ? std::filesystem::path(home) / ".cache"
                                                       : std::filesystem::path();
    return RateCache(base.empty() ? base : base / "llama-cl" / "backend-rates.json");
}

std::optional<PathRates> RateCache::find(const std::string& key) const {
    if (file_.empty()) return std::nullopt;
    const nlohmann::json j = read_json(file_);
    if (j.value("build", "") != this_build() || !j.contains("rates") || !j["rates"].is_object()) return std::nullopt;
    const auto entry = j["rates"].find(key);
    if (entry == j["rates"].end() || !entry->is_object()) return std::nullopt;
    const auto rate = [&](const char* path) {
        const auto r = entry->find(path);
        return r != entry->end() && r->is_number() ? r->get<double>() : -1.0;
    };
    const PathRates rates{rate("reference"), rate("device")};
    if (!(rates.reference > 0) || !(rates.device > 0)) return std::nullopt;
    return rates;
}

bool RateCache::store(const std::string& key, const PathRates& rates) const {
    if (file_.empty()) return false;
    nlohmann::json j = read_json(file_);
    if (j.value("build", "") != this_build() || !j.contains("rates") || !j["rates"].is_object())
        j = {{"build", this_build()}, {"rates", nlohmann::json::object()}};
    j["rates"][key] = {{"reference", rates.reference}, {"device", rates.device}};
    try {
        std::error_code ec;
        std::filesystem::create_directories(file_.parent_path(), ec);
        AtomicFile out(file_.string(), {}, "--backend auto");
        out.write(j.dump(2) + "\n");
        out.commit();
        return true;
    } catch (const Error&) {
        return false;
    }
}

namespace {

// One path's passes, and the best rate of its timed rounds.
class Pace {
public:
    static constexpr int kWindow = 64;
    Pace(Forward& model, Work work, int positions)
        : model_(model), work_(work), positions_(std::max(1, positions)),
          window_(static_cast<std::size_t>(std::min(positions_, kWindow)), kBos) {}

    // Passes for at least `seconds` (one at least); the round's rate kept if it is the best.
    void round(double seconds) {
        using Clock = std::chrono::steady_clock;
        const Clock::time_point start = Clock::now();
        long long done = 0;
        double elapsed = 0;
        do {
            done += pass();
            elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        } while (elapsed < seconds);
        best_ = std::max(best_, static_cast<double>(done) / std::max(elapsed, 1e-9));
    }
    // Positions run by one pass.
    int pass() {
        if (work_ == Work::prompt) {
            model_.prefill(window_, 0, [](int, std::span<float>) {});  // every position's logits, as perplexity's
            return static_cast<int>(window_.size());
        }
        model_.forward(kBos, next_);
        next_ = (next_ + 1) % positions_;
        return 1;
    }
    double best() const { return best_; }

private:
    static constexpr int kBos = 1;
    Forward& model_;
    Work work_;
    int positions_;
    std::vector<int> window_;
    int next_ = 0;  // Work::decode: the next pass's position
    double best_ = 0;
};

}  // namespace

PathRates measure_rates(Forward& device, Forward& reference, Work work, int positions) {
    constexpr int kRounds = 4;
    constexpr double kRoundSeconds = 0.05;
    Pace on_device(device, work, positions), on_reference(reference, work, positions);
    on_device.pass();
    on_reference.pass();
    for (int round = 0; round < kRounds; ++round) {
        on_device.round(kRoundSeconds);
        on_reference.round(kRoundSeconds);
    }
    return PathRates{on_reference.best(), on_device.best()};
}

}  // namespace llamacl
