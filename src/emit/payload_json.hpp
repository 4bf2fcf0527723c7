// Reading jsonb for the brokers: the compact JSON text of a value, and the
// members of an object (headers, sink options).
#pragma once

#include "pg_bridge.hpp"

#include <string_view>

extern "C" {
#include "lib/stringinfo.h"
#include "utils/jsonb.h"
}

namespace outbox {

// Append the compact JSON text of `container` to `out` (palloc'd memory):
// what the brokers receive as the payload (contract: "the payload as compact
// JSON text"). jsonb's own text form puts a space after ':' and ','; this one
// does not. Keys keep jsonb's order.
void AppendCompactJson(StringInfo out, JsonbContainer *container);

// Calls fn(key, value) for each member of the jsonb object `object`, in
// jsonb order. The key's bytes and a string value's point into `object`.
// fn may raise an ERROR: nothing here has a destructor.
template <typename Fn>
void ForEachMember(Jsonb *object, Fn &&fn) {
  JsonbIterator *it = JsonbIteratorInit(&object->root);
  JsonbValue v;
  std::string_view key;
  JsonbIteratorToken token;
  while ((token = JsonbIteratorNext(&it, &v, true)) != WJB_DONE) {
    if (token == WJB_KEY) {
      key = std::string_view(v.val.string.val, v.val.string.len);
    } else if (token == WJB_VALUE) {
      fn(key, v);
    }
  }
}

}  // namespace outbox
