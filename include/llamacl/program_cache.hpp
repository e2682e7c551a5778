#pragma once
// Program binaries kept between runs, in $XDG_CACHE_HOME/llama-cl (else ~/.cache/llama-cl). A build from
// the driver's own binary skips the front end that every build from source runs, even one the driver has
// cached itself (PoCL preprocesses the whole source to find its cache entry). An entry is keyed by all a
// binary depends on (platform, driver, device, options, source) and checked on load; one that is missing,
// damaged or refused by the driver is rebuilt from source and written again.
#include <string>
#include <vector>

namespace llamacl {

// The binary stored for `key`, or empty: none, damaged, or no usable cache directory.
std::vector<unsigned char> cached_program_binary(const std::string& key);
// Stores `binary` for `key` (atomically: a concurrent run reads the old entry or the new one); does
// nothing where the cache directory cannot be made or written. Best effort: a cache is never an error.
void cache_program_binary(const std::string& key, const std::vector<unsigned char>& binary);

}  // namespace llamacl
