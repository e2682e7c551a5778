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

double measure_rate(Forward& model, Work work, int positions) {
    using Clock = std::chrono::steady_clock;
    constexpr double kBudgetSeconds = 0.2;
    constexpr int kWindow = 64;
    const int span = std::max(1, std::min(positions, kWindow));
    const int bos = 1;
    const std::vector<int> window(static_cast<std::size_t>(span), bos);
    int next = 0;  // Work::decode: the position of the next pass
    // One pass, and the positions it ran.
    const auto pass = [&] {
        if (work == Work::prompt) {
            model.prefill(window, 0, [](int, std::span<float>) {});  // every position's logits, as perplexity's
            return span;
        }
        model.forward(bos, next);
        next = (next + 1) % span;
        return 1;
    };
    pass();
    long long done = 0;
    int passes = 0;
    const Clock::time_point start = Clock::now();
    double seconds = 0;
    do {
        done += pass();
        ++passes;
        seconds = std::chrono::duration<double>(Clock::now() - start).count();
    } while (passes < 2 || seconds < kBudgetSeconds);
    return static_cast<double>(done) / std::max(seconds, 1e-9);
}

}  // namespace llamacl
