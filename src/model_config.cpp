#include "llamacl/model_config.hpp"

namespace llamacl {

Config within_positions(const Config& c, int positions) {
    Config reached = c;
    if (positions > 0 && positions < c.seq_len) reached.seq_len = positions;
    return reached;
}

}  // namespace llamacl
