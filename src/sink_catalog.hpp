// Sinks and routes as stored in outbox.sinks and outbox.routes.
#pragma once

#include "pg_bridge.hpp"
#include "sink_options.hpp"

extern "C" {
#include "utils/jsonb.h"
}

namespace outbox {

// The options object of a sink as views into palloc'd copies, in jsonb key
// order; numbers keep their text. ERROR 22023 unless `options` is an object.
OptionView *FlattenSinkOptions(Jsonb *options, int *count);

}  // namespace outbox
