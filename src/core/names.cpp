#include "core/names.hpp"

namespace outbox {

namespace {
bool IsTopicChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

bool AllOf(std::string_view s, size_t max_len, bool allow_star) {
  if (s.empty() || s.size() > max_len) return false;
  for (char c : s) {
    if (!IsTopicChar(c) && !(allow_star && c == '*')) return false;
  }
  return true;
}
}  // namespace

bool IsValidTopic(std::string_view topic) { return AllOf(topic, kMaxTopicLength, false); }

bool IsValidKafkaTopic(std::string_view topic) {
  return IsValidTopic(topic) && topic != "." && topic != "..";
}

bool IsValidPattern(std::string_view pattern) { return AllOf(pattern, kMaxTopicLength, true); }

bool IsValidSinkName(std::string_view name) { return AllOf(name, kMaxSinkNameLength, false); }

}  // namespace outbox
