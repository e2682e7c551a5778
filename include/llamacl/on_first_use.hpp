#pragma once
// Values made the first time each is asked for and kept from then on, so that what a run never asks for
// is never made: KernelSet's programs, of which a cold start compiles only those its run launches.
#include <functional>
#include <map>
#include <utility>
#include <variant>

namespace llamacl {

// One value per key (one in all with the default key), made by `make` at the first call for its key.
// A `make` that throws leaves its key unmade, to be tried again at the next call.
template <typename Value, typename Key = std::monostate>
class OnFirstUse {
public:
    explicit OnFirstUse(std::function<Value(const Key&)> make) : make_(std::move(make)) {}
    // Not copied: `make` may refer to the owner.
    OnFirstUse(const OnFirstUse&) = delete;
    OnFirstUse& operator=(const OnFirstUse&) = delete;

    // (Making a value counts as reading it: a const owner makes what it is asked for.)
    Value& operator()(const Key& key = {}) const {
        auto it = made_.find(key);
        if (it == made_.end()) it = made_.emplace(key, make_(key)).first;
        return it->second;
    }
    bool made(const Key& key = {}) const { return made_.contains(key); }

private:
    std::function<Value(const Key&)> make_;
    mutable std::map<Key, Value> made_;  // (a map keeps references to its values while others are made)
};

}  // namespace llamacl
