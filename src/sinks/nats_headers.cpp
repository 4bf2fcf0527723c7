// The NATS sink's headers (nats_headers.hpp).
#include "sinks/nats_headers.hpp"

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/message_format.hpp"

namespace outbox {

namespace {

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto fold = [](char c) {
      return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (fold(a[i]) != fold(b[i])) return false;
  }
  return true;
}

// The headers outbox itself sets in the raw and cloudevents formats: when
// one of them cannot travel, the message cannot be sent as its format says.
bool IsOutboxHeader(std::string_view name) {
  static constexpr std::string_view kOurs[] = {"outbox-id",       "outbox-topic",    "outbox-key",
                                               "ce-specversion",  "ce-id",           "ce-source",
                                               "ce-type",         "ce-time",         "content-type",
                                               "ce-partitionkey", "ce-outboxheaders"};
  for (std::string_view ours : kOurs) {
    if (name == ours) return true;
  }
  return false;
}

}  // namespace

NatsHeaderUse ClassifyNatsHeader(std::string_view name, std::string_view value) {
  if (name.empty()) return NatsHeaderUse::kBadName;
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == ':') return NatsHeaderUse::kBadName;
  }
  if ((name.size() >= 5 && EqualsIgnoringCase(name.substr(0, 5), "nats-")) ||
      EqualsIgnoringCase(name, "status") || EqualsIgnoringCase(name, "description")) {
    return NatsHeaderUse::kMeaningToNats;
  }
  if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) {
    return NatsHeaderUse::kBadValue;
  }
  return NatsHeaderUse::kKept;
}

std::optional<std::string> NatsHeaders(const OutMessage &m, std::string *scratch,
                                       std::vector<Header> *out) {
  HeaderedHeaders(m, CloudEventsMode::kBinary, scratch, out);
  size_t kept = 0;
  for (size_t i = 0; i < out->size(); ++i) {
    const Header h = (*out)[i];
    if (ClassifyNatsHeader(h.name, h.value) == NatsHeaderUse::kKept) {
      (*out)[kept++] = h;
    } else if (IsOutboxHeader(h.name)) {
      return "its header " + std::string(h.name) +
             " cannot travel in a NATS header: its value holds a line break or NUL";
    }
  }
  out->resize(kept);
  out->insert(out->begin(), Header{"Nats-Msg-Id", m.id});
  return std::nullopt;
}

}  // namespace outbox
