// The HTTP sink's judgement of answers (http_outcomes.hpp).
#include "sinks/http_outcomes.hpp"

#include <ctime>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

HttpAnswer ClassifyHttpStatus(long status) {
  if (status >= 200 && status <= 299) return HttpAnswer::kDelivered;
  if (status == 408 || status == 429 || (status >= 500 && status <= 599)) {
    return HttpAnswer::kTransient;
  }
  if (status >= 300 && status <= 399) return HttpAnswer::kTransient;  // the endpoint moved
  if (status <= 0) return HttpAnswer::kTransient;                     // no answer
  return HttpAnswer::kEventFault;
}

namespace {

bool Digits(std::string_view text, int64_t *out) {
  if (text.empty() || text.size() > 12) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

// "Sun, 06 Nov 1994 08:49:37 GMT" (IMF-fixdate, the form RFC 9110 sends).
std::optional<int64_t> ImfFixdate(std::string_view text) {
  static constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                                 "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (text.size() != 29 || text.substr(3, 2) != ", " || text.substr(25) != " GMT" ||
      text[7] != ' ' || text[11] != ' ' || text[16] != ' ' || text[19] != ':' || text[22] != ':') {
    return std::nullopt;
  }
  int64_t day = 0, year = 0, hour = 0, minute = 0, second = 0;
  if (!Digits(text.substr(5, 2), &day) || !Digits(text.substr(12, 4), &year) ||
      !Digits(text.substr(17, 2), &hour) || !Digits(text.substr(20, 2), &minute) ||
      !Digits(text.substr(23, 2), &second)) {
    return std::nullopt;
  }
  int month = -1;
  for (int m = 0; m < 12; ++m) {
    if (text.substr(8, 3) == kMonths[m]) month = m;
  }
  if (month < 0 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return std::nullopt;
  }
  // Days since the epoch (the civil calendar, proleptic Gregorian).
  const int64_t y = year - (month < 2 ? 1 : 0);
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t mp = (month + 10) % 12;  // March is 0
  const int64_t doy = (153 * mp + 2) / 5 + day - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  const int64_t days = era * 146097 + doe - 719468;
  return days * 86400 + hour * 3600 + minute * 60 + second;
}

}  // namespace

std::optional<int64_t> ParseRetryAfter(std::string_view value, int64_t now_unix_s) {
  while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
  while (!value.empty() && (value.back() == ' ' || value.back() == '\t' || value.back() == '\r' ||
                            value.back() == '\n')) {
    value.remove_suffix(1);
  }
  int64_t seconds = 0;
  if (Digits(value, &seconds)) return seconds * 1000;
  const std::optional<int64_t> at = ImfFixdate(value);
  if (!at) return std::nullopt;
  return *at > now_unix_s ? (*at - now_unix_s) * 1000 : 0;
}

std::string QuotedResponse(std::string_view body) {
  std::string out;
  const size_t n = body.size() < kHttpMaxQuotedResponse ? body.size() : kHttpMaxQuotedResponse;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto u = static_cast<unsigned char>(body[i]);
    out.push_back(u < 0x20 || u >= 0x7f ? '?' : body[i]);
  }
  return out;
}

// Only endpoints with failures since their last 2xx are remembered (one
// without is as if never seen), so an emit() role sending to many targets
// that answer cannot push a failing endpoint out. When the memory is full,
// endpoints with one failure go first; those judged down (two) only when
// nothing else is left.
HttpEndpoints::Memory &HttpEndpoints::At(const std::string &endpoint) {
  auto it = endpoints_.find(endpoint);
  if (it != endpoints_.end()) return it->second;
  if (endpoints_.size() >= kMaxEndpoints) {
    for (auto e = endpoints_.begin(); e != endpoints_.end();) {
      e = e->second.failed.size() < 2 ? endpoints_.erase(e) : std::next(e);
    }
    if (endpoints_.size() >= kMaxEndpoints) endpoints_.clear();
  }
  return endpoints_[endpoint];
}

void HttpEndpoints::Delivered(const std::string &endpoint) {
  const auto it = endpoints_.find(endpoint);
  if (it != endpoints_.end()) endpoints_.erase(it);
}

void HttpEndpoints::Failed(const std::string &endpoint, std::string_view id) {
  Memory &m = At(endpoint);
  if (m.failed.size() < 2 && m.failed.find(id) == m.failed.end()) m.failed.emplace(id);
}

bool HttpEndpoints::Down(const std::string &endpoint, bool delivered_now, bool not_the_events) {
  if (not_the_events) return true;
  if (delivered_now) return false;  // others go through: the event is refused
  const auto it = endpoints_.find(endpoint);
  if (it == endpoints_.end()) return false;  // no failure remembered
  const Memory &m = it->second;
  // Different events failed since the last 2xx (or since the endpoint was
  // first used): the endpoint is down. One event failing alone, again and
  // again, is that event's: it spends its attempts, even at an endpoint
  // that never answered a 2xx, so a payload always refused ends dead.
  return m.failed.size() >= 2;
}

}  // namespace outbox
