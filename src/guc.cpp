// The outbox.* settings. Each one's range is stated in its long description,
// and the README's settings table repeats them.
#include "guc.hpp"

#include <cstdlib>
#include <cstring>

#include "fault_injection.hpp"
#include "core/trace_context.hpp"

extern "C" {
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "utils/datetime.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

namespace outbox {
namespace guc {

int premake_days = 3;
int batch_size = 1000;
int max_batch_bytes = 4 * 1024 * 1024;
int batches_in_flight = 4;
int ack_wait_ms = 500;
int max_attempts = 10;
int backoff_min_ms = 100;
int backoff_max_ms = 60000;
int poll_interval_ms = 1000;
int wake_interval_ms = 5;
int workers = 1;
int max_databases = 0;
int max_databases_per_owner = 2;
int max_payload_bytes = 1024 * 1024;
int maintenance_lock_timeout_ms = 100;
bool emit_direct_insert = true;
char *traceparent = nullptr;
char *cloudevents_source = nullptr;
char *tracestate = nullptr;

namespace {

char *retention_text = nullptr;
Interval retention_value;

// Parse an interval the way interval_in does, but without raising: a check
// hook may run in the postmaster, where an ERROR is not an option.
bool ParseInterval(const char *text, Interval *out) {
  char buf[256];
  char workbuf[256];
  char *field[MAXDATEFIELDS];
  int ftype[MAXDATEFIELDS];
  int nf = 0;
  int dtype = 0;
  struct pg_itm_in itm;
  if (text == nullptr) return false;
  const size_t len = std::strlen(text);
  if (len >= sizeof buf) return false;
  std::memcpy(buf, text, len + 1);
  int dterr = ParseDateTime(buf, workbuf, sizeof workbuf, field, ftype, MAXDATEFIELDS, &nf);
  if (dterr == 0) dterr = DecodeInterval(field, ftype, nf, INTERVAL_FULL_RANGE, &dtype, &itm);
  if (dterr == DTERR_BAD_FORMAT) dterr = DecodeISO8601Interval(buf, &dtype, &itm);
  if (dterr != 0 || dtype != DTK_DELTA) return false;
  return itmin2interval(&itm, out) == 0;
}

bool CheckRetention(char **newval, void **extra, GucSource source) {
  Interval parsed;
  if (!ParseInterval(*newval, &parsed)) {
    GUC_check_errdetail("\"%s\" is not an interval, e.g. '7 days' or '36 hours'.", *newval);
    return false;
  }
  if (parsed.time < 0 || parsed.day < 0 || parsed.month < 0) {
    GUC_check_errdetail("outbox.retention must not be negative.");
    return false;
  }
  // The server frees extra itself: it must come from its allocator.
  void *copy = GucExtraAlloc(sizeof(Interval));
  if (copy == nullptr) return false;
  std::memcpy(copy, &parsed, sizeof parsed);
  *extra = copy;
  return true;
}

void AssignRetention(const char *newval, void *extra) {
  if (extra != nullptr) std::memcpy(&retention_value, extra, sizeof retention_value);
}

// Whether a trace context may come from `source`: only from the session
// itself (SET, SET LOCAL, the client's connection options). A value in the
// server's files or set for a database or role (ALTER DATABASE ... SET, which
// a database owner may run; validated as PGC_S_TEST) would go into the
// events of every session there, other roles' included, as their own.
bool SessionSource(GucSource source) {
  return source == PGC_S_DEFAULT || source == PGC_S_DYNAMIC_DEFAULT || source == PGC_S_CLIENT ||
         source == PGC_S_SESSION || source == PGC_S_OVERRIDE || source == PGC_S_INTERACTIVE;
}

bool RefuseSharedTraceContext(const char *name) {
  GUC_check_errdetail(
      "%s is taken from the session only (SET or SET LOCAL): set for a database "
      "or role it would go into every session's events there.",
      name);
  return false;
}

bool CheckTraceparent(char **newval, void **extra, GucSource source) {
  if (*newval != nullptr && **newval != '\0' && !SessionSource(source)) {
    return RefuseSharedTraceContext("outbox.traceparent");
  }
  if (*newval == nullptr || **newval == '\0' || IsValidTraceparent(*newval)) return true;
  GUC_check_errdetail(
      "A traceparent is \"00-<32 hex trace-id>-<16 hex parent-id>-<2 hex flags>\" "
      "(W3C Trace Context), lower-case; a later version may append \"-...\", up to 512 "
      "characters of printable ASCII in all.");
  return false;
}

bool CheckTracestate(char **newval, void **extra, GucSource source) {
  if (*newval != nullptr && **newval != '\0' && !SessionSource(source)) {
    return RefuseSharedTraceContext("outbox.tracestate");
  }
  if (*newval == nullptr || IsValidTracestate(*newval)) return true;
  GUC_check_errdetail("A tracestate is at most 512 characters of printable ASCII.");
  return false;
}

}  // namespace

const Interval &Retention() { return retention_value; }

void Define() {
  DefineCustomStringVariable(
      "outbox.retention", "How long published events are kept.",
      "An interval such as '7 days'. A partition whose whole day is older than this is "
      "dropped, unless it still holds pending or dead events.",
      &retention_text, "7 days", PGC_SUSET, 0, CheckRetention, AssignRetention, nullptr);

  DefineCustomIntVariable("outbox.premake", "Days of partitions created ahead of today.",
                          "Valid range is 0 .. 365.", &premake_days, 3, 0, 365, PGC_SUSET, 0,
                          nullptr, nullptr, nullptr);

  DefineCustomIntVariable("outbox.batch_size", "Most events one claim takes.",
                          "Valid range is 1 .. 100000.", &batch_size, 1000, 1, 100000, PGC_SUSET, 0,
                          nullptr, nullptr, nullptr);

  // What a batch's events may weigh: the publisher holds a window of
  // batches as JSON text (and librdkafka a copy), so this, not batch_size,
  // bounds its memory when payloads are large.
  DefineCustomIntVariable("outbox.max_batch_bytes",
                          "Most bytes of payload, key and headers one claim takes.",
                          "Valid range is 64 kB .. 1 GB. A claim stops taking events once they "
                          "weigh this much (it always takes at least one); the publisher holds "
                          "up to outbox.batches_in_flight such batches.",
                          &max_batch_bytes, 4 * 1024 * 1024, 64 * 1024, 1024 * 1024 * 1024,
                          PGC_SUSET, GUC_UNIT_BYTE, nullptr, nullptr, nullptr);

  // Pipelining: while the brokers answer one batch, the publisher claims and
  // sends the next, in the same transaction, up to this many at once.
  DefineCustomIntVariable("outbox.batches_in_flight",
                          "Most claimed batches a publisher has at the brokers at once.",
                          "Valid range is 1 .. 16. 1 waits for each batch's acknowledgements "
                          "before claiming the next.",
                          &batches_in_flight, 4, 1, 16, PGC_SUSET, 0, nullptr, nullptr, nullptr);

  DefineCustomIntVariable("outbox.max_attempts",
                          "Failed attempts after which an event becomes dead.",
                          "Valid range is 1 .. 1000000.", &max_attempts, 10, 1, 1000000, PGC_SUSET,
                          0, nullptr, nullptr, nullptr);

  DefineCustomIntVariable("outbox.backoff_min", "Shortest wait before retrying an event.",
                          "Valid range is 1 ms .. 1 hour.", &backoff_min_ms, 100, 1, 3600000,
                          PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr, nullptr);

  DefineCustomIntVariable("outbox.backoff_max", "Longest wait before retrying an event.",
                          "Valid range is 1 ms .. 1 day; if below outbox.backoff_min, "
                          "outbox.backoff_min is used.",
                          &backoff_max_ms, 60000, 1, 86400000, PGC_SUSET, GUC_UNIT_MS, nullptr,
                          nullptr, nullptr);

  DefineCustomIntVariable(
      "outbox.ack_wait", "How long a publish cycle waits for a sink's acknowledgements.",
      "A sink that has not answered by then does not hold up the cycle: its "
      "events wait, parked, and its answers are recorded by a later cycle, "
      "so one slow sink or topic never delays the others. 0 waits for "
      "every answer. Valid range is 0 .. 1 hour.",
      &ack_wait_ms, 500, 0, 3600000, PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr, nullptr);

  DefineCustomIntVariable("outbox.poll_interval",
                          "Safety poll of the publisher; commits wake it at once.",
                          "Valid range is 10 ms .. 1 hour.", &poll_interval_ms, 1000, 10, 3600000,
                          PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr, nullptr);

  DefineCustomIntVariable(
      "outbox.wake_interval",
      "Shortest time between two publish cycles that commits start: events committed meanwhile "
      "are published together.",
      "Valid range is 0 .. 1 s; 0 starts a cycle for every commit. A commit after a quieter "
      "spell is published at once; under load each event waits at most this long for its "
      "cycle, and the publisher spends far less CPU per event.",
      &wake_interval_ms, 5, 0, 1000, PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr, nullptr);

  // A server-start setting can only be defined while preloading (defining it
  // later is FATAL); without preloading there is no publisher to size anyway.
  if (process_shared_preload_libraries_in_progress) {
    DefineCustomIntVariable("outbox.workers", "Publisher processes per database.",
                            "Valid range is 1 .. 64. Takes effect at server start.", &workers, 1, 1,
                            64, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
  }

  // PGC_SIGHUP: the launcher, which applies it, reads the configuration
  // file only; a DBA's cluster-wide choice, never a database's.
  DefineCustomIntVariable(
      "outbox.max_databases", "Most databases that have publishers at once.",
      "0 (the default) means no limit. Beyond it, databases with the extension get no "
      "publisher, with a WARNING, and their events wait; those that have one keep it. "
      "Bounds the background workers outbox takes: max_databases * outbox.workers + 1.",
      &max_databases, 0, 0, 10000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);

  // PGC_SIGHUP as max_databases. Databases that superusers own are never
  // counted: a role that may CREATE DATABASE (and so copy one, and own the
  // copy) is the one this bounds.
  DefineCustomIntVariable(
      "outbox.max_databases_per_owner",
      "Most databases owned by one role that is not a superuser that have publishers at once.",
      "0 means no limit. Beyond it, that role's databases with the extension get no publisher, "
      "with a WARNING, and their events wait; those that have one keep it. Databases "
      "superusers own are not counted.",
      &max_databases_per_owner, 2, 0, 10000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);

  DefineCustomIntVariable("outbox.max_payload_bytes",
                          "Largest payload outbox.emit() accepts, measured as JSON text.",
                          "Valid range is 1 byte .. 512 MB.", &max_payload_bytes, 1024 * 1024, 1,
                          512 * 1024 * 1024, PGC_SUSET, GUC_UNIT_BYTE, nullptr, nullptr, nullptr);

  DefineCustomIntVariable(
      "outbox.maintenance_lock_timeout",
      "Longest time partition maintenance waits for a lock before retrying later.",
      "Valid range is 1 ms .. 1 minute. Bounds how long outbox.maintain() can delay emit().",
      &maintenance_lock_timeout_ms, 100, 1, 60000, PGC_SUSET, GUC_UNIT_MS, nullptr, nullptr,
      nullptr);

  // The escape hatch for event_insert.cpp's direct path (and the benchmark's
  // way to compare it with the SPI INSERT side by side).
  DefineCustomBoolVariable(
      "outbox.emit_direct_insert",
      "emit() writes its row straight into the day's partition instead of through an INSERT.",
      "Both write the same row; off runs a prepared INSERT for every event, which costs more.",
      &emit_direct_insert, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);

  DefineCustomStringVariable(
      "outbox.traceparent", "W3C traceparent that emit() copies into the event's headers.",
      "Set it per transaction (SET LOCAL) from the application's current span; empty: none.",
      &traceparent, "", PGC_USERSET, 0, CheckTraceparent, nullptr, nullptr);

  DefineCustomStringVariable(
      "outbox.tracestate", "W3C tracestate that emit() copies into the event's headers.",
      "Copied only together with outbox.traceparent; at most 512 characters.", &tracestate, "",
      PGC_USERSET, 0, CheckTracestate, nullptr, nullptr);

  DefineCustomStringVariable(
      "outbox.cloudevents_source", "The source attribute of events sent in the cloudevents format.",
      "A URI-reference naming where events come from; empty: /outbox/<database name>. Set it "
      "per database with ALTER DATABASE ... SET (the publisher reads it when it starts).",
      &cloudevents_source, "", PGC_SUSET, 0, nullptr, nullptr, nullptr);

  fault::DefineSetting();  // test builds only
  MarkGUCPrefixReserved("outbox");
}

std::string_view CloudEventsSource() {
  if (cloudevents_source != nullptr && cloudevents_source[0] != '\0') {
    return std::string_view(cloudevents_source);
  }
  // Built once: a publisher serves one database for its whole life.
  static char *fallback = nullptr;
  if (fallback == nullptr) {
    const char *db = get_database_name(MyDatabaseId);
    fallback = MemoryContextStrdup(TopMemoryContext,
                                   psprintf("/outbox/%s", db != nullptr ? db : "unknown"));
  }
  return std::string_view(fallback);
}

}  // namespace guc
}  // namespace outbox
