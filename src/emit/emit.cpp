// outbox.emit(topic, payload, key, headers): the SQL entry point applications
// call inside their own transaction. It validates, generates a UUIDv7 and
// inserts one row (event_insert.hpp: straight into the day's partition). It
// never talks to a broker: the row becomes visible to the publisher when the
// caller commits, and vanishes with the caller's transaction or
// subtransaction if they roll back.
//
// This is the hot path of every business transaction: no SQL text built or
// planned per call (what the insert needs is worked out once per session,
// see event_insert.hpp), no C++ objects (so every ereport below is safe).
#include "pg_bridge.hpp"

#include "shmem/emit_horizon.hpp"
#include "shmem/id_stamp.hpp"
#include "emit/event_insert.hpp"
#include "guc.hpp"
#include "shmem/key_slot.hpp"
#include "core/names.hpp"
#include "core/partition_calendar.hpp"
#include "emit/payload_json.hpp"
#include "shmem/commit_wakeup.hpp"
#include "shmem/shmem.hpp"
#include "core/uuid7.hpp"

extern "C" {
#include "catalog/pg_collation.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "port.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
}

namespace outbox {
namespace {

// Per backend, when outbox is not preloaded (no shared stamp,
// shmem/id_stamp.hpp): keeps this backend's ids ordered.
Uuid7Generator id_generator;

void ValidateTopic(text *topic) {
  const char *data = VARDATA_ANY(topic);
  const int len = VARSIZE_ANY_EXHDR(topic);
  if (!IsValidTopic(std::string_view(data, len))) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("invalid topic %s", QuoteValue(data, len)),
                    errdetail("topic must be 1 to %d characters of [A-Za-z0-9._-].",
                              static_cast<int>(kMaxTopicLength))));
  }
}

void ValidatePayload(Jsonb *payload) {
  // The limit is on the JSON text (octet_length(payload::text)), which is what
  // the brokers receive; jsonb's binary size is no bound on it either way.
  const char *as_text = JsonbToCString(nullptr, &payload->root, VARSIZE(payload));
  const size_t len = strlen(as_text);
  if (len > static_cast<size_t>(guc::max_payload_bytes)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("payload is too large: %zu bytes as JSON text", len),
                    errdetail("outbox.max_payload_bytes is %d bytes.", guc::max_payload_bytes)));
  }
}

void ValidateKey(text *key) {
  const size_t len = VARSIZE_ANY_EXHDR(key);
  if (len > kMaxKeyBytes) {
    ereport(ERROR,
            (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("key is too large: %zu bytes", len),
             errdetail("A key is at most %zu bytes.", kMaxKeyBytes)));
  }
}

// `len` bytes as JSON text, or (binary) bytes as jsonb.
void HeadersTooLarge(size_t len, bool binary) {
  ereport(ERROR,
          (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
           errmsg("headers are too large: %zu bytes as %s", len, binary ? "jsonb" : "JSON text"),
           errdetail("Headers are at most %zu bytes as JSON text.", kMaxHeadersBytes)));
}

void ValidateHeaders(Jsonb *headers) {
  if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                    errmsg("headers must be a JSON object or NULL")));
  }
  // Binary jsonb is never more than about twice its text, so a value this
  // big is refused without being turned into text first (a header of
  // control characters grows sixfold as text: 180 MB would not fit).
  if (VARSIZE(headers) > 4 * kMaxHeadersBytes) HeadersTooLarge(VARSIZE(headers), true);
  const size_t len = strlen(JsonbToCString(nullptr, &headers->root, VARSIZE(headers)));
  if (len > kMaxHeadersBytes) HeadersTooLarge(len, false);
  ForEachMember(headers, [](std::string_view key, const JsonbValue &value) {
    if (value.type != jbvString) {
      ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE),
                      errmsg("headers value for key %s must be a JSON string",
                             QuoteValue(key.data(), static_cast<int>(key.size())))));
    }
  });
}

// The headers to store: the session's trace context (outbox.traceparent and
// outbox.tracestate, when set) under the user's headers, which win on a name
// clash. Only called when a traceparent is set.
Datum HeadersWithTraceContext(bool has_headers, Datum headers) {
  JsonbParseState *state = nullptr;
  JsonbValue k, v;
  auto push_string = [&](const char *key, const char *value) {
    k.type = jbvString;
    k.val.string.val = const_cast<char *>(key);
    k.val.string.len = static_cast<int>(strlen(key));
    v.type = jbvString;
    v.val.string.val = const_cast<char *>(value);
    v.val.string.len = static_cast<int>(strlen(value));
    pushJsonbValue(&state, WJB_KEY, &k);
    pushJsonbValue(&state, WJB_VALUE, &v);
  };
  pushJsonbValue(&state, WJB_BEGIN_OBJECT, nullptr);
  push_string("traceparent", guc::traceparent);
  if (guc::tracestate != nullptr && guc::tracestate[0] != '\0') {
    push_string("tracestate", guc::tracestate);
  }
  Jsonb *trace = JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, nullptr));
  if (!has_headers) return JsonbPGetDatum(trace);
  return DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(trace), headers);
}

// Who writes the event: the owner of the SQL function that called us, as
// SECURITY DEFINER would have it (event_insert.hpp says why it is not).
// Kept in fn_extra for the calls of one statement; only superusers can
// declare another SQL function over this C symbol.
Oid Writer(FunctionCallInfo fcinfo) {
  FmgrInfo *flinfo = fcinfo->flinfo;
  if (flinfo->fn_extra != nullptr) return *static_cast<Oid *>(flinfo->fn_extra);
  HeapTuple proc = SearchSysCache1(PROCOID, ObjectIdGetDatum(flinfo->fn_oid));
  if (!HeapTupleIsValid(proc)) elog(ERROR, "cache lookup failed for function %u", flinfo->fn_oid);
  const Oid owner = reinterpret_cast<Form_pg_proc>(GETSTRUCT(proc))->proowner;
  ReleaseSysCache(proc);
  Oid *kept = static_cast<Oid *>(MemoryContextAlloc(flinfo->fn_mcxt, sizeof(Oid)));
  *kept = owner;
  flinfo->fn_extra = kept;
  return owner;
}

}  // namespace
}  // namespace outbox

extern "C" {
PG_FUNCTION_INFO_V1(outbox_emit);
}

// No OUTBOX_SQL_FUNCTION shim here: nothing in this function can throw a C++
// exception (Uuid7Generator::Next and the name check are noexcept in
// practice: no allocation), and skipping the try block keeps the hot path lean.
extern "C" Datum outbox_emit(PG_FUNCTION_ARGS) {
  using namespace outbox;

  if (PG_ARGISNULL(0)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("topic must not be NULL")));
  }
  if (PG_ARGISNULL(1)) {
    ereport(ERROR, (errcode(ERRCODE_INVALID_PARAMETER_VALUE), errmsg("payload must not be NULL")));
  }
  text *topic = PG_GETARG_TEXT_PP(0);
  Jsonb *payload = PG_GETARG_JSONB_P(1);
  ValidateTopic(topic);
  ValidatePayload(payload);
  const bool has_key = !PG_ARGISNULL(2);
  if (has_key) ValidateKey(PG_GETARG_TEXT_PP(2));
  bool has_headers = !PG_ARGISNULL(3);
  if (has_headers) ValidateHeaders(PG_GETARG_JSONB_P(3));
  Datum headers = has_headers ? PG_GETARG_DATUM(3) : (Datum)0;
  if (guc::traceparent != nullptr && guc::traceparent[0] != '\0') {
    headers = HeadersWithTraceContext(has_headers, headers);
    has_headers = true;
  }

  // Before the id is taken: publish that this transaction holds events from
  // now on (emit_horizon.hpp), so no claim's starting point passes them
  // however long the insert below waits for a lock or the commit comes.
  NoteEmitting();
  // The id's millisecond and created_at come from the same clock reading, so
  // an event's id tells which daily partition holds it.
  const TimestampTz now = GetCurrentTimestamp();
  uint8_t random[10];
  if (!pg_strong_random(random, sizeof random)) {
    ereport(ERROR, (errcode(ERRCODE_INTERNAL_ERROR), errmsg("could not generate random bytes")));
  }
  const int64_t unix_ms = now / 1000 + kPgEpochUnixSeconds * 1000;
  uint64_t stamp = 0;
  const Uuid id = NextIdStamp(unix_ms, random, &stamp) ? Uuid7FromStamp(stamp, random)
                                                       : id_generator.Next(unix_ms, random);
  pg_uuid_t *uuid = static_cast<pg_uuid_t *>(palloc(sizeof(pg_uuid_t)));
  memcpy(uuid->data, id.data(), UUID_LEN);

  Datum values[kEmitColumns] = {};
  bool isnull[kEmitColumns] = {};
  values[kColId] = UUIDPGetDatum(uuid);
  values[kColTopic] = PointerGetDatum(topic);
  values[kColKey] = has_key ? PG_GETARG_DATUM(2) : (Datum)0;
  isnull[kColKey] = !has_key;
  values[kColPayload] = PointerGetDatum(payload);
  values[kColHeaders] = headers;
  isnull[kColHeaders] = !has_headers;
  values[kColCreatedAt] = TimestampTzGetDatum(now);
  InsertEvent(values, isnull, Writer(fcinfo));

  // Not now: at commit, and only if the transaction commits; and only the
  // publisher that handles this key (key_slot.hpp: the hash the claims use
  // on the key column, through outbox.key_slot()). With one
  // publisher there is no choice to make: it is woken as for a keyless event,
  // and the hash is not computed.
  int key_slot = -1;
  if (has_key && Shared() != nullptr && guc::workers > 1) {
    key_slot = KeySlotOf(PG_GETARG_DATUM(2));
  }
  WakeKeyOwnerAtCommit(key_slot);
  PG_RETURN_UUID_P(uuid);
}
