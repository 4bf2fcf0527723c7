// The rows the dispatcher (dispatch.hpp) and the publisher's SQL side pass
// each other: claimed events, routes and sinks in; each event's outcome and
// the late answers of slow sinks out. Plain data of views: the publisher
// fills them from palloc'd memory, so nothing here owns or frees anything,
// and an ERROR may jump over any of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/message_format.hpp"
#include "core/sink.hpp"
#include "core/sink_option.hpp"

namespace outbox {

struct EventRow {
  std::string_view id;
  std::string_view topic;
  bool has_key = false;
  std::string_view key;
  std::string_view payload;  // compact JSON
  const Header *headers = nullptr;
  size_t header_count = 0;
  std::string_view headers_json;  // compact JSON object, "{}" when none
  int64_t created_at = 0;         // timestamptz: microseconds since 2000-01-01 UTC
  int attempts = 0;
};

struct RouteRow {
  std::string_view pattern;
  std::string_view sink;
  bool has_target = false;
  std::string_view target;
  bool paused = false;  // outbox.pause(): its events wait like unrouted ones
  MessageFormat format = MessageFormat::kRaw;
};

struct SinkRow {
  std::string_view name;
  std::string_view kind;  // "kafka", "redis", ... (sinks/sink_factory.hpp)
  const OptionView *options = nullptr;
  size_t option_count = 0;
  // Whoever could have written the sink's options is a superuser (the
  // extension owner is one): options only a superuser may set are allowed
  // (sink_options.hpp).
  bool privileged = false;
};

struct DispatchSettings {
  int max_attempts = 10;
  int64_t backoff_min_ms = 100;
  int64_t backoff_max_ms = 60000;
  int64_t now_us = 0;       // the caller's clock, in the unit next_attempt_us uses
  std::string_view source;  // the CloudEvents source of this database's events
  int64_t ack_wait_ms = 0;  // see "Slow sinks"; 0: wait for every answer
  // The caller's clock now (same unit as now_us), read when a group is left
  // to late answers: a cycle may have waited long (a lock) since now_us, and
  // a late event must stay parked until its sink must have answered, counted
  // from when it was sent. Null: now_us.
  int64_t (*clock_us)() = nullptr;
};

// next_attempt_us of an event that waits until routes change (no route, a
// paused route, a route naming a missing sink): PostgreSQL's 'infinity'.
constexpr int64_t kInfinityUs = INT64_MAX;

enum class Outcome {
  kPublished,    // acknowledged: status published
  kRetry,        // failed attempt: attempts + 1, retried at next_attempt_us
  kDead,         // failed its last allowed attempt: status dead
  kPark,         // not attempted (sink down, or behind an earlier event of
                 // its key): only next_attempt_us and error change
  kParkNoRoute,  // no route matches its topic, or its route is paused:
                 // waits until routes change
  kUntouched,    // interrupted before an outcome: row left as it was
};

struct RowOutcome {
  Outcome outcome = Outcome::kUntouched;
  int attempts = 0;             // the row's attempts after this batch
  int64_t next_attempt_us = 0;  // for kRetry and kPark
  char error[256] = {0};        // for everything but kPublished and kUntouched
};

// An answer a sink gave after its batch was finished (see "Slow sinks"),
// judged. Plain data: the caller may hold it across a longjmp.
struct LateOutcome {
  char id[40] = {0};            // canonical UUID text
  int64_t created_at = 0;       // the event's (finds its partition)
  int attempts = 0;             // the row's attempts while it was parked
  int64_t parked_until_us = 0;  // the row's next_attempt_us while it was parked
  int64_t answered_at_us = 0;   // Delivery::answered_at_us (0: unknown)
  RowOutcome outcome;           // never kUntouched
};

}  // namespace outbox
