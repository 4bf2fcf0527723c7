// Loading a publisher's configuration: sinks, routes and the per-key order
// state.
#pragma once

#include "pg_bridge.hpp"

#include "core/dispatch.hpp"

namespace outbox {

// Load outbox.sinks and outbox.routes into the dispatcher, let events that
// waited for a route flow again, and rebuild the per-key order state from
// the events waiting for a retry. Requires: a transaction open with an
// active snapshot, SPI connected, running as the extension's owner; the
// caller's memory context is short-lived.
void LoadConfiguration(Dispatcher *dispatcher);

}  // namespace outbox
