// Every outbox.* setting. Defined in _PG_init (guc.cpp); read anywhere.
// Values are plain globals owned by PostgreSQL's GUC machinery: read them, do
// not write them.
#pragma once

#include "pg_bridge.hpp"

#include <string_view>

extern "C" {
#include "datatype/timestamp.h"
}

namespace outbox {
namespace guc {

extern int premake_days;
extern int batch_size;
extern int max_batch_bytes;
extern int batches_in_flight;
extern int max_attempts;
extern int backoff_min_ms;
extern int backoff_max_ms;
extern int poll_interval_ms;
extern int wake_interval_ms;
extern int ack_wait_ms;
extern int workers;
extern int max_databases;            // 0: no limit (launcher.cpp)
extern int max_databases_per_owner;  // 0: no limit (launcher.cpp)
extern int max_payload_bytes;
extern int maintenance_lock_timeout_ms;
extern bool emit_direct_insert;
// W3C trace context of the current session/transaction ("" when unset):
// emit() copies them into the event's headers.
extern char *traceparent;
extern char *tracestate;
extern char *cloudevents_source;  // use CloudEventsSource()

// The CloudEvents source of this database's events: outbox.cloudevents_source,
// or "/outbox/<database name>" when it is empty. Requires a database
// connection (the publisher).
std::string_view CloudEventsSource();

// outbox.retention, parsed (the GUC itself is text holding an interval).
const Interval &Retention();

void Define();

}  // namespace guc
}  // namespace outbox
