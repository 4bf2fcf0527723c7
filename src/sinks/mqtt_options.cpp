// The MQTT sink's options and topic rule (mqtt_options.hpp).
#include "sinks/mqtt_options.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace outbox {

namespace {

constexpr const char *kValidKeys =
    "host, port, client_id, user, password, tls, tls_verify, tls_ca, keepalive, protocol, qos, "
    "retain, connect_timeout_ms, ack_timeout_ms, connections";

// Inline certificates larger than this are refused: a trust store of a few
// certificates is a few kilobytes, and the text is written out on every
// connection.
constexpr size_t kMaxCaBytes = size_t{1} << 20;

bool TakesNumber(std::string_view key) {
  return key == "port" || key == "keepalive" || key == "protocol" || key == "qos" ||
         key == "connect_timeout_ms" || key == "ack_timeout_ms" || key == "connections";
}

bool IsKnown(std::string_view key) {
  return TakesNumber(key) || key == "host" || key == "client_id" || key == "user" ||
         key == "password" || key == "tls" || key == "tls_verify" || key == "tls_ca" ||
         key == "retain";
}

std::string Named(std::string_view key) { return "option \"" + std::string(key) + "\""; }

// A whole number written as plain decimal digits (a JSON number may end in
// ".0"), without sign; nothing otherwise or above 999,999,999.
std::optional<int64_t> WholeNumber(const SinkOption &opt) {
  std::string_view text = opt.text;
  if (opt.kind == SinkOption::Kind::kNumber) {
    const size_t dot = text.find('.');
    if (dot != std::string_view::npos) {
      if (dot + 1 == text.size() ||
          text.find_first_not_of('0', dot + 1) != std::string_view::npos) {
        return std::nullopt;
      }
      text = text.substr(0, dot);
    }
  }
  if (text.empty() || text.size() > 9) return std::nullopt;
  int64_t value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

bool CleanUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    uint32_t cp = 0;
    size_t len = 0;
    if (b < 0x80) {
      cp = b;
      len = 1;
    } else if (b >= 0xc2 && b <= 0xdf) {
      cp = b & 0x1fu;
      len = 2;
    } else if (b >= 0xe0 && b <= 0xef) {
      cp = b & 0x0fu;
      len = 3;
    } else if (b >= 0xf0 && b <= 0xf4) {
      cp = b & 0x07u;
      len = 4;
    } else {
      return false;
    }
    if (i + len > text.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto c = static_cast<unsigned char>(text[i + k]);
      if ((c & 0xc0u) != 0x80u) return false;
      cp = (cp << 6) | (c & 0x3fu);
    }
    const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f)) return false;
    if ((cp >= 0xfdd0 && cp <= 0xfdef) || (cp & 0xfffeu) == 0xfffeu) return false;
    // U+FEFF (the byte order mark): MQTT allows it, but common clients
    // (paho-mqtt) refuse the whole packet and, subscribed at QoS 1, get it
    // again on every reconnect: one event would stop a consumer for good.
    if (cp == 0xfeff) return false;
    i += len;
  }
  return true;
}

bool IsClientIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_' || c == '.';
}

std::optional<std::string> InRange(const SinkOption &opt, int64_t v, int64_t min, int64_t max,
                                   int *out) {
  if (v < min || v > max) {
    return Named(opt.key) + " must be between " + std::to_string(min) + " and " +
           std::to_string(max);
  }
  *out = static_cast<int>(v);
  return std::nullopt;
}

std::optional<std::string> ApplyNumber(const SinkOption &opt, MqttOptions *r) {
  const std::string &key = opt.key;
  if (key == "protocol") {
    if (opt.text == "5" || opt.text == "5.0") {
      r->protocol = 5;
    } else if (opt.text == "3.1.1" && opt.kind == SinkOption::Kind::kString) {
      r->protocol = 311;
    } else {
      return Named(key) + " must be \"5\" or \"3.1.1\", not \"" + opt.text + "\"";
    }
    return std::nullopt;
  }
  const std::optional<int64_t> v = WholeNumber(opt);
  if (!v) return Named(key) + " must be a whole number, not \"" + opt.text + "\"";
  if (key == "port") return InRange(opt, *v, 1, 65535, &r->port);
  if (key == "qos") return InRange(opt, *v, 1, 2, &r->qos);
  // libmosquitto refuses a keepalive under 5 s; MQTT's is 16 bits of seconds.
  if (key == "keepalive") return InRange(opt, *v, 5, 65535, &r->keepalive_s);
  if (key == "connections") return InRange(opt, *v, 1, kMqttMaxConnections, &r->connections);
  if (key == "connect_timeout_ms") {
    return InRange(opt, *v, kMqttMinTimeoutMs, kMqttMaxConnectTimeoutMs, &r->connect_timeout_ms);
  }
  return InRange(opt, *v, kMqttMinTimeoutMs, kMqttMaxAckTimeoutMs, &r->ack_timeout_ms);
}

// One string option into *r: its error, or nothing.
std::optional<std::string> ApplyText(const SinkOption &opt, MqttOptions *r) {
  const std::string &key = opt.key;
  const std::string &text = opt.text;
  if (key == "host") {
    if (text.empty() || text.size() > 253 || !CleanUtf8(text) ||
        text.find_first_of(" /@") != std::string::npos) {
      return Named(key) + " must be a host name or address: 1 to 253 bytes, no control " +
             "characters, spaces, '/' or '@'";
    }
    r->host = text;
  } else if (key == "client_id") {
    if (text.empty() || text.size() > kMqttMaxClientIdPrefix) {
      return Named(key) + " must be 1 to " + std::to_string(kMqttMaxClientIdPrefix) +
             " characters of [A-Za-z0-9._-]";
    }
    for (const char c : text) {
      if (!IsClientIdChar(c)) {
        return Named(key) + " must be characters of [A-Za-z0-9._-], not \"" + text + "\"";
      }
    }
    r->client_id = text;
  } else if (key == "user") {
    if (text.empty() || text.size() > 65535 || !CleanUtf8(text)) {
      return Named(key) + " must be 1 to 65535 bytes of UTF-8 without control characters";
    }
    r->user = text;
  } else if (key == "password") {
    // Never quoted back: it is a secret. libmosquitto takes it as a C string.
    if (text.empty() || text.size() > 65535 || text.find('\0') != std::string::npos) {
      return Named(key) + " must be 1 to 65535 bytes without a NUL byte";
    }
    r->password = text;
  } else if (key == "tls" || key == "tls_verify" || key == "retain") {
    if (text != "true" && text != "false") {
      return Named(key) + " must be \"true\" or \"false\", not \"" + text + "\"";
    }
    (key == "tls" ? r->tls : key == "retain" ? r->retain : r->tls_verify) = text == "true";
  } else {  // tls_ca
    if (text.size() > kMaxCaBytes || text.find('\0') != std::string::npos ||
        text.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return Named(key) +
             " must be the PEM text of one or more certificates (\"-----BEGIN CERTIFICATE-----"
             "...\"), at most 1 MB; a file name is not accepted";
    }
    r->tls_ca = text;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ParseMqttOptions(const SinkOptions &options, MqttOptions *out) {
  MqttOptions r;
  std::string tls_detail;  // tls_verify or tls_ca, when given
  for (const SinkOption &opt : options) {
    if (!IsKnown(opt.key)) {
      return "unknown option \"" + opt.key + "\" (valid: " + kValidKeys + ")";
    }
    if (opt.kind == SinkOption::Kind::kUnresolved) return Named(opt.key) + " " + opt.text;
    const bool numeric = TakesNumber(opt.key);
    if (opt.kind == SinkOption::Kind::kOther ||
        (opt.kind == SinkOption::Kind::kNumber && !numeric)) {
      return Named(opt.key) + " must be a JSON string" + (numeric ? " or number" : "");
    }
    std::optional<std::string> invalid = numeric ? ApplyNumber(opt, &r) : ApplyText(opt, &r);
    if (invalid) return invalid;
    if (opt.key == "tls_verify" || opt.key == "tls_ca") tls_detail = opt.key;
  }
  if (!tls_detail.empty() && !r.tls) {
    return Named(tls_detail) + " applies only with \"tls\": \"true\"";
  }
  if (r.password && !r.user) return Named("password") + " needs option \"user\"";
  if (out != nullptr) *out = std::move(r);
  return std::nullopt;
}

std::optional<std::string> ValidateMqttOptions(const SinkOptions &options) {
  return ParseMqttOptions(options, nullptr);
}

std::optional<std::string> CheckMqttTopic(std::string_view topic) {
  if (topic.empty()) return std::string("An MQTT topic must not be empty.");
  if (topic.size() > kMqttMaxTopicBytes) {
    return "An MQTT topic is at most " + std::to_string(kMqttMaxTopicBytes) + " bytes.";
  }
  if (!CleanUtf8(topic)) {
    return std::string("An MQTT topic is valid UTF-8 without control characters (NUL included).");
  }
  if (topic.find_first_of("+#") != std::string_view::npos) {
    return std::string(
        "An MQTT topic one publishes to holds no wildcard ('+' or '#': only subscriptions use "
        "them).");
  }
  if (topic.front() == '$') {
    return std::string("Topics starting with '$' are the broker's own (such as $SYS).");
  }
  if (topic.front() == '/' || topic.back() == '/' || topic.find("//") != std::string_view::npos) {
    return std::string(
        "An MQTT topic's levels must not be empty (no leading or trailing '/', no \"//\").");
  }
  return std::nullopt;
}

bool IsMqttString(std::string_view text) { return text.size() <= 65535 && CleanUtf8(text); }

std::string MqttClientId(std::string_view prefix, uint64_t nonce) {
  static const char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id.push_back('-');
  for (int shift = 60; shift >= 0; shift -= 4) id.push_back(kHex[(nonce >> shift) & 0xfu]);
  return id;
}

}  // namespace outbox
