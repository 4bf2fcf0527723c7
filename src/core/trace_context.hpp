// W3C Trace Context (https://www.w3.org/TR/trace-context/): the values
// emit() copies from outbox.traceparent / outbox.tracestate into an event's
// headers, so a trace crosses the broker. PostgreSQL-free.
#pragma once

#include <cstddef>
#include <string_view>

namespace outbox {

// "00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>", lower-case hex,
// ids not all zero, version not "ff". Versions above 00 may append
// "-<more>" (the spec's forward compatibility), up to kMaxTraceparentLength
// characters of printable ASCII in all.
constexpr size_t kMaxTraceparentLength = 512;
bool IsValidTraceparent(std::string_view value);

// At most 512 characters of printable ASCII, as the spec bounds it; the
// list-member syntax is the tracing system's business.
bool IsValidTracestate(std::string_view value);

}  // namespace outbox
