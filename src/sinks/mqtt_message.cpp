// The MQTT sink's messages and reason codes (mqtt_message.hpp).
#include "sinks/mqtt_message.hpp"

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "core/message_format.hpp"
#include "sinks/mqtt_options.hpp"

namespace outbox {

namespace {

// A property as an error may show it: its first 64 bytes, anything but
// printable ASCII as '?'.
std::string Shown(std::string_view text) {
  std::string shown = "\"";
  for (const char c : text.substr(0, 64)) {
    const auto u = static_cast<unsigned char>(c);
    shown.push_back(u < 0x20 || u >= 0x7f ? '?' : c);
  }
  return shown + (text.size() > 64 ? "...\"" : "\"");
}

}  // namespace

std::optional<std::string> BuildMqttMessage(const OutMessage &m, bool mqtt5, std::string *scratch,
                                            MqttMessage *out) {
  out->properties.clear();
  out->content_type = std::string_view();
  if (!HeaderedFormat(m.format)) {
    return "the " + std::string(MessageFormatName(m.format)) +
           " format cannot be sent to MQTT (routes to MQTT sinks take raw or cloudevents)";
  }
  if (!mqtt5) {
    scratch->clear();
    AppendRedisBody(m, scratch);
    out->body = *scratch;
    return std::nullopt;
  }
  const bool cloudevents = m.format == MessageFormat::kCloudEvents;
  out->body = HeaderedBody(m, CloudEventsMode::kStructured, scratch);
  out->content_type = cloudevents ? "application/cloudevents+json" : "application/json";
  if (cloudevents) {
    out->properties.push_back({"outbox-id", m.id});
    out->properties.push_back({"outbox-topic", m.topic});
    if (m.has_key) out->properties.push_back({"outbox-key", m.key});
  } else {
    // Raw's headers never point into the scratch (it has no rewritten
    // value), so the body's scratch is not disturbed.
    std::string unused;
    HeaderedHeaders(m, CloudEventsMode::kStructured, &unused, &out->properties);
  }
  for (const Header &h : out->properties) {
    if (h.name.empty() || !IsMqttString(h.name) || !IsMqttString(h.value)) {
      return "header " + Shown(h.name) +
             " cannot travel as an MQTT 5 user property (name and value must be UTF-8 without "
             "control characters, the name not empty)";
    }
  }
  return std::nullopt;
}

DeliveryStatus MqttReasonOutcome(int reason_code) {
  if (reason_code < 0x80) return DeliveryStatus::kDelivered;
  switch (reason_code) {
    case 0x87:  // not authorized
    case 0x90:  // topic name invalid
      return DeliveryStatus::kTargetRefused;
    case 0x91:  // packet identifier in use
    case 0x97:  // quota exceeded
      return DeliveryStatus::kRetriable;
    default:
      return DeliveryStatus::kRejected;
  }
}

std::string MqttReasonText(int reason_code) {
  const char *name = "unknown reason";
  switch (reason_code) {
    case 0x00:
      name = "success";
      break;
    case 0x10:
      name = "no matching subscribers";
      break;
    case 0x80:
      name = "unspecified error";
      break;
    case 0x83:
      name = "implementation specific error";
      break;
    case 0x87:
      name = "not authorized";
      break;
    case 0x90:
      name = "topic name invalid";
      break;
    case 0x91:
      name = "packet identifier in use";
      break;
    case 0x92:
      name = "packet identifier not found";
      break;
    case 0x97:
      name = "quota exceeded";
      break;
    case 0x99:
      name = "payload format invalid";
      break;
    default:
      break;
  }
  char code[8];
  std::snprintf(code, sizeof code, "0x%02x", static_cast<unsigned>(reason_code) & 0xffu);
  return std::string(code) + " " + name;
}

}  // namespace outbox
