#pragma once
// What the device runtime did, counted as it happens. Tests and `bench` read these instead of
// believing the schedule: enqueues and host waits per token, bytes moved per token.
#include <cstdint>

namespace llamacl {

struct RuntimeCounters {
    std::uint64_t enqueues = 0;               // kernels and buffer commands put on the queue
    std::uint64_t host_waits = 0;             // times the host blocked until the device caught up
    std::uint64_t weight_bytes_uploaded = 0;  // layer weights staged host -> device
    std::uint64_t input_bytes_uploaded = 0;   // token embedding rows host -> device
    std::uint64_t bytes_read = 0;             // results device -> host (logits or hidden state)

    RuntimeCounters operator-(const RuntimeCounters& o) const {
        return {enqueues - o.enqueues, host_waits - o.host_waits, weight_bytes_uploaded - o.weight_bytes_uploaded,
                input_bytes_uploaded - o.input_bytes_uploaded, bytes_read - o.bytes_read};
    }
};

}  // namespace llamacl
