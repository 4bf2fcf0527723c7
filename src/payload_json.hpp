// Compact JSON text of a jsonb value: what the brokers receive as the payload
// (contract: "the payload as compact JSON text"). jsonb's own text form puts
// a space after ':' and ','; this one does not. Keys keep jsonb's order.
#pragma once

#include "pg_bridge.hpp"

extern "C" {
#include "lib/stringinfo.h"
#include "utils/jsonb.h"
}

namespace outbox {

// Append the compact JSON text of `container` to `out` (palloc'd memory).
void AppendCompactJson(StringInfo out, JsonbContainer *container);

}  // namespace outbox
