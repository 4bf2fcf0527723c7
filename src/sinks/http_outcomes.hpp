// How the HTTP sink judges what came of a request, as plain functions of
// the answer (tested as tables in test/unit/http_outcomes_test.cpp): the
// status codes, Retry-After, the response text an error may quote, and
// whether an endpoint is down or one event is refused (HttpEndpoints).
// No libcurl, no PostgreSQL header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

namespace outbox {

enum class HttpAnswer {
  kDelivered,   // 2xx
  kTransient,   // 408, 429, 5xx, 3xx not followed, no answer: the event's or the endpoint's
  kEventFault,  // any other 4xx (and 1xx left at the end): the event's, an attempt
};

HttpAnswer ClassifyHttpStatus(long status);

// A Retry-After value in ms from now: delta-seconds, or an HTTP-date
// (IMF-fixdate) against `now_unix_s`; nothing when it is neither. Never
// negative.
std::optional<int64_t> ParseRetryAfter(std::string_view value, int64_t now_unix_s);

// At most kHttpMaxQuotedResponse bytes of a response body, as an error may
// quote it: control characters and non-ASCII bytes shown as '?'.
constexpr size_t kHttpMaxQuotedResponse = 256;
std::string QuotedResponse(std::string_view body);

// What the sink remembers of each endpoint (the URL after {target}) across
// calls, so that a transient failure is judged the endpoint's only when
// requests for different events to it fail, and the event's when others to
// it succeed. Bounded: at most kMaxEndpoints are remembered.
class HttpEndpoints {
 public:
  static constexpr size_t kMaxEndpoints = 4096;

  // A 2xx from `endpoint`.
  void Delivered(const std::string &endpoint);
  // A transient failure of event `id` at `endpoint`. A call notes all of
  // its failures before judging any, so that failures of different events
  // in one call count together whatever order they came in.
  void Failed(const std::string &endpoint, std::string_view id);
  // Whether the endpoint's transient failures make it down (true) or are
  // each the event's own (false). `delivered_now`: it took another event in
  // the same call. `not_the_events`: no answer could be had at all (no
  // connection, name or TLS handshake), or the endpoint asked to be left
  // alone for a while (429, Retry-After), which no event causes.
  bool Down(const std::string &endpoint, bool delivered_now, bool not_the_events);

 private:
  struct Memory {
    std::set<std::string, std::less<>> failed;  // events failed since the last 2xx (at most 2)
  };
  Memory &At(const std::string &endpoint);
  std::map<std::string, Memory, std::less<>> endpoints_;
};

}  // namespace outbox
