// The AMQP sink's options and routing-key rule (amqp_options.hpp).
#include "sinks/amqp_options.hpp"

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

namespace {

constexpr const char *kValidKeys =
    "host, port, vhost, user, password, exchange, tls, tls_verify, tls_ca, heartbeat, "
    "connect_timeout_ms, delivery_timeout_ms";

// Inline certificates larger than this are refused: a trust store of a few
// certificates is a few kilobytes, and the text is written out on every
// connection.
constexpr size_t kMaxCaBytes = size_t{1} << 20;

bool IsNumeric(std::string_view key) {
  return key == "port" || key == "heartbeat" || key == "connect_timeout_ms" ||
         key == "delivery_timeout_ms";
}

bool IsKnown(std::string_view key) {
  return IsNumeric(key) || key == "host" || key == "vhost" || key == "user" || key == "password" ||
         key == "exchange" || key == "tls" || key == "tls_verify" || key == "tls_ca";
}

// A decimal integer: a string of plain digits (an optional '-'), or a JSON
// number, which keeps the scale it was written with (5672.0 is 5672).
std::optional<int64_t> ParseInteger(const SinkOption &opt) {
  std::string digits = opt.text;
  if (opt.kind == SinkOption::Kind::kNumber) {
    const size_t dot = digits.find('.');
    if (dot != std::string::npos && dot + 1 < digits.size() &&
        digits.find_first_not_of('0', dot + 1) == std::string::npos) {
      digits.resize(dot);
    }
  }
  size_t i = !digits.empty() && digits[0] == '-' ? 1 : 0;
  if (i == digits.size()) return std::nullopt;
  for (; i < digits.size(); ++i) {
    if (digits[i] < '0' || digits[i] > '9') return std::nullopt;
  }
  errno = 0;
  const long long v = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno != 0) return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<bool> ParseBool(std::string_view text) {
  if (text == "true") return true;
  if (text == "false") return false;
  return std::nullopt;
}

// A control character (NUL included) has no place in a host name, a
// virtual host or a user name, and a NUL would cut the C strings
// librabbitmq is given (and PLAIN authentication's NUL-separated response).
bool HasControl(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

std::string Quoted(const std::string &key) { return "option \"" + key + "\""; }

std::optional<std::string> Range(const SinkOption &opt, int64_t v, int64_t min, int64_t max,
                                 int *out) {
  if (v < min || v > max) {
    return Quoted(opt.key) + " must be between " + std::to_string(min) + " and " +
           std::to_string(max);
  }
  *out = static_cast<int>(v);
  return std::nullopt;
}

// One option into *r: its error, or nothing.
std::optional<std::string> Apply(const SinkOption &opt, AmqpOptions *r) {
  const std::string &key = opt.key;
  if (IsNumeric(key)) {
    const std::optional<int64_t> v = ParseInteger(opt);
    if (!v) {
      // Never quote a value that could be a secret; these are numbers.
      return Quoted(key) + " must be an integer, not \"" + opt.text + "\"";
    }
    if (key == "port") return Range(opt, *v, 1, 65535, &r->port);
    // AMQP's heartbeat is an unsigned 16-bit number of seconds.
    if (key == "heartbeat") return Range(opt, *v, 0, 65535, &r->heartbeat_s);
    if (key == "connect_timeout_ms") return Range(opt, *v, 100, 300000, &r->connect_timeout_ms);
    return Range(opt, *v, 100, 3600000, &r->delivery_timeout_ms);
  }
  const std::string &text = opt.text;
  if (key == "host") {
    if (text.empty() || text.size() > kAmqpMaxShortString || HasControl(text)) {
      return Quoted(key) + " must be 1 to 255 bytes without control characters";
    }
    r->host = text;
  } else if (key == "vhost") {
    if (text.empty() || text.size() > kAmqpMaxShortString || HasControl(text)) {
      return Quoted(key) + " must be 1 to 255 bytes without control characters";
    }
    r->vhost = text;
  } else if (key == "user") {
    if (text.empty() || HasControl(text)) {
      return Quoted(key) + " must be non-empty, without control characters";
    }
    r->user = text;
  } else if (key == "password") {
    // PLAIN separates user and password with NUL bytes. The value is never
    // quoted back: it is a secret.
    if (text.find('\0') != std::string::npos) return Quoted(key) + " must not hold a NUL byte";
    r->password = text;
  } else if (key == "exchange") {
    if (text.size() > kAmqpMaxShortString || HasControl(text)) {
      return Quoted(key) +
             " must be at most 255 bytes without control characters (\"\": the "
             "default exchange)";
    }
    r->exchange = text;
  } else if (key == "tls" || key == "tls_verify") {
    const std::optional<bool> v = ParseBool(text);
    if (!v) return Quoted(key) + " must be \"true\" or \"false\", not \"" + text + "\"";
    (key == "tls" ? r->tls : r->tls_verify) = *v;
  } else {  // tls_ca
    if (text.size() > kMaxCaBytes || text.find('\0') != std::string::npos ||
        text.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return Quoted(key) +
             " must be the PEM text of one or more certificates (\"-----BEGIN CERTIFICATE-----"
             "...\"), at most 1 MB; a file name is not accepted";
    }
    r->tls_ca = text;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ParseAmqpOptions(const SinkOptions &options, AmqpOptions *out) {
  AmqpOptions r;
  std::string tls_detail;  // tls_verify or tls_ca, when given
  for (const SinkOption &opt : options) {
    if (opt.kind == SinkOption::Kind::kUnresolved) return Quoted(opt.key) + " " + opt.text;
    if (!IsKnown(opt.key)) {
      return "unknown option \"" + opt.key + "\" (valid: " + kValidKeys + ")";
    }
    const bool numeric = IsNumeric(opt.key);
    if (opt.kind == SinkOption::Kind::kOther ||
        (opt.kind == SinkOption::Kind::kNumber && !numeric)) {
      return Quoted(opt.key) + " must be a JSON string" + (numeric ? " or number" : "") +
             (opt.key == "tls" || opt.key == "tls_verify" ? " (\"true\" or \"false\")" : "");
    }
    if (std::optional<std::string> invalid = Apply(opt, &r)) return invalid;
    if (opt.key == "tls_verify" || opt.key == "tls_ca") tls_detail = opt.key;
  }
  if (!tls_detail.empty() && !r.tls) {
    return Quoted(tls_detail) + " applies only with \"tls\": \"true\"";
  }
  if (out != nullptr) *out = std::move(r);
  return std::nullopt;
}

std::optional<std::string> ValidateAmqpOptions(const SinkOptions &options) {
  return ParseAmqpOptions(options, nullptr);
}

std::optional<std::string> CheckAmqpRoutingKey(std::string_view target) {
  if (target.size() <= kAmqpMaxShortString) return std::nullopt;
  return "An AMQP routing key is at most 255 bytes.";
}

}  // namespace outbox
