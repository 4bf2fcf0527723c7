// Fault injection rules (see fault_points.hpp). The table is plain storage
// (no heap), so configuring it from a GUC assign hook can neither fail nor
// leak.
#include "core/fault_points.hpp"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <new>
#include <stdexcept>

namespace outbox {
namespace fault {
namespace {

struct Rule {
  char point[kMaxPointLength + 1];  // NUL-terminated; a trailing '*' is a prefix match
  Action action;
  uint32_t one_in;  // fire with probability 1/one_in
  int64_t left;     // fires left; -1: no limit
};

Rule rules[kMaxRules];
size_t nrules = 0;
uint64_t rng_state = 0;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool ParseAction(std::string_view name, Action *action) {
  static constexpr struct {
    const char *name;
    Action action;
  } kActions[] = {
      {"none", Action::kNone},           {"error", Action::kError},     {"cancel", Action::kCancel},
      {"terminate", Action::kTerminate}, {"sigkill", Action::kSigkill}, {"oom", Action::kOom},
      {"exception", Action::kException}, {"stall", Action::kStall},     {"latch", Action::kLatch}};
  for (const auto &a : kActions) {
    if (name == a.name) {
      *action = a.action;
      return true;
    }
  }
  return false;
}

bool ParseNumber(std::string_view text, int64_t *value) {
  if (text.empty() || text.size() > 9) return false;
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *value = v;
  return true;
}

// One "point=action[/N][#K]". Returns why not, or nullptr.
const char *ParseRule(std::string_view text, Rule *rule) {
  const size_t eq = text.find('=');
  if (eq == std::string_view::npos) return "a rule is point=action";
  const std::string_view point = Trim(text.substr(0, eq));
  std::string_view rest = Trim(text.substr(eq + 1));
  if (point.empty() || point.size() > kMaxPointLength) return "a point is 1 to 64 characters";
  for (size_t i = 0; i < point.size(); ++i) {
    const char c = point[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    (c == '*' && i + 1 == point.size());
    if (!ok) return "a point is [a-z0-9_.] with an optional trailing '*'";
  }
  int64_t one_in = 1, left = -1;
  const size_t hash = rest.find('#');
  if (hash != std::string_view::npos) {
    if (!ParseNumber(Trim(rest.substr(hash + 1)), &left)) return "#K needs a number";
    rest = Trim(rest.substr(0, hash));
  }
  const size_t slash = rest.find('/');
  if (slash != std::string_view::npos) {
    if (!ParseNumber(Trim(rest.substr(slash + 1)), &one_in) || one_in < 1) {
      return "/N needs a number of at least 1";
    }
    rest = Trim(rest.substr(0, slash));
  }
  Action action;
  if (!ParseAction(rest, &action)) {
    return "the action is none, error, cancel, terminate, sigkill, oom, stall, latch or exception";
  }
  if (rule != nullptr) {
    std::memcpy(rule->point, point.data(), point.size());
    rule->point[point.size()] = '\0';
    rule->action = action;
    rule->one_in = static_cast<uint32_t>(one_in);
    rule->left = left;
  }
  return nullptr;
}

template <typename F>
void ForEachRule(std::string_view spec, F &&f) {
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = Trim(spec.substr(0, comma));
    if (!item.empty()) f(item);
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
}

bool Matches(const char *pattern, std::string_view point) {
  const size_t n = std::strlen(pattern);
  if (n > 0 && pattern[n - 1] == '*')
    return point.substr(0, n - 1) == std::string_view(pattern, n - 1);
  return point == std::string_view(pattern, n);
}

uint64_t NextRandom() {
  if (rng_state == 0) rng_state = 0x9e3779b97f4a7c15ULL ^ static_cast<uint64_t>(getpid());
  rng_state ^= rng_state << 13;  // xorshift64
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

}  // namespace

bool Validate(std::string_view spec, std::string *error) {
  size_t count = 0;
  const char *why = nullptr;
  ForEachRule(spec, [&](std::string_view item) {
    ++count;
    if (why == nullptr) why = ParseRule(item, nullptr);
  });
  if (why == nullptr && count > kMaxRules) why = "at most 16 rules";
  if (why != nullptr && error != nullptr) *error = why;
  return why == nullptr;
}

void Configure(std::string_view spec) noexcept {
  nrules = 0;
  ForEachRule(spec, [&](std::string_view item) {
    if (nrules < kMaxRules && ParseRule(item, &rules[nrules]) == nullptr) ++nrules;
  });
}

Action Decide(std::string_view point) noexcept {
  for (size_t i = 0; i < nrules; ++i) {
    Rule &r = rules[i];
    if (!Matches(r.point, point)) continue;
    if (r.left == 0) return Action::kNone;
    if (r.one_in > 1 && NextRandom() % r.one_in != 0) return Action::kNone;
    if (r.left > 0) --r.left;
    return r.action;
  }
  return Action::kNone;
}

void HitCpp(std::string_view point) {
  switch (Decide(point)) {
    case Action::kOom:
      throw std::bad_alloc();
    case Action::kException:
      throw std::runtime_error("injected C++ exception at " + std::string(point));
    default:
      break;
  }
}

const char *ActionName(Action action) noexcept {
  switch (action) {
    case Action::kNone:
      return "none";
    case Action::kError:
      return "error";
    case Action::kCancel:
      return "cancel";
    case Action::kTerminate:
      return "terminate";
    case Action::kSigkill:
      return "sigkill";
    case Action::kOom:
      return "oom";
    case Action::kException:
      return "exception";
    case Action::kStall:
      return "stall";
    case Action::kLatch:
      return "latch";
  }
  return "?";
}

}  // namespace fault
}  // namespace outbox
