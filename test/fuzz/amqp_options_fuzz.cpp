// Fuzz target: ParseAmqpOptions accepts exactly the options the AMQP sink
// documents (docs/reference.md), fills AmqpOptions with the last value of
// each, leaves *out alone on error, names the offending option in its
// message, never quotes a password, agrees with ValidateAmqpOptions, and
// round-trips: an accepted configuration written back as options parses to
// itself. CheckAmqpRoutingKey refuses exactly the keys over 255 bytes.
//
// Input: option lines (see option_lines.hpp), e.g. "shost=rabbit\nnport=5673".
#include "option_lines.hpp"
#include "sinks/amqp_options.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

namespace {

using namespace outbox;
using Kind = SinkOption::Kind;

// A password text other options do not hold (checked): control bytes
// around it.
const char kMarker[] = "\x01outbox-password-marker\x02";

void Fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "invariant failed: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

bool Same(const AmqpOptions &a, const AmqpOptions &b) {
  return a.host == b.host && a.port == b.port && a.vhost == b.vhost && a.user == b.user &&
         a.password == b.password && a.exchange == b.exchange && a.tls == b.tls &&
         a.tls_verify == b.tls_verify && a.tls_ca == b.tls_ca && a.heartbeat_s == b.heartbeat_s &&
         a.connect_timeout_ms == b.connect_timeout_ms &&
         a.delivery_timeout_ms == b.delivery_timeout_ms;
}

// ^-?[0-9]+$ within int64, by hand rather than through strtoll.
std::optional<int64_t> RefInteger(const std::string &s) {
  size_t i = 0;
  const bool neg = !s.empty() && s[0] == '-';
  if (neg) i = 1;
  if (i == s.size()) return std::nullopt;
  int64_t v = 0;  // accumulated negatively so INT64_MIN fits
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    const int d = s[i] - '0';
    if (v < (std::numeric_limits<int64_t>::min() + d) / 10) return std::nullopt;
    v = v * 10 - d;
  }
  if (!neg) {
    if (v == std::numeric_limits<int64_t>::min()) return std::nullopt;
    v = -v;
  }
  return v;
}

bool Control(const std::string &s) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// The documented reading: which option is wrong, or nothing with *out filled.
std::optional<std::string> RefParse(const SinkOptions &options, AmqpOptions *out) {
  AmqpOptions r;
  std::string tls_detail;
  for (const SinkOption &o : options) {
    const std::string &k = o.key;
    const bool numeric =
        k == "port" || k == "heartbeat" || k == "connect_timeout_ms" || k == "delivery_timeout_ms";
    const bool text = k == "host" || k == "vhost" || k == "user" || k == "password" ||
                      k == "exchange" || k == "tls" || k == "tls_verify" || k == "tls_ca";
    if (o.kind == Kind::kUnresolved || (!numeric && !text)) return k;
    if (o.kind == Kind::kOther || (o.kind == Kind::kNumber && !numeric)) return k;
    if (numeric) {
      // A JSON number may carry a zero fraction (5672.0); a string must be
      // plain digits.
      std::string digits = o.text;
      const size_t dot = digits.find('.');
      if (o.kind == Kind::kNumber && dot != std::string::npos && dot + 1 < digits.size() &&
          digits.find_first_not_of('0', dot + 1) == std::string::npos) {
        digits.resize(dot);
      }
      const std::optional<int64_t> v = RefInteger(digits);
      if (!v) return k;
      int64_t lo = 100, hi = 3600000;
      int *field = &r.delivery_timeout_ms;
      if (k == "port") lo = 1, hi = 65535, field = &r.port;
      if (k == "heartbeat") lo = 0, hi = 65535, field = &r.heartbeat_s;
      if (k == "connect_timeout_ms") hi = 300000, field = &r.connect_timeout_ms;
      if (*v < lo || *v > hi) return k;
      *field = static_cast<int>(*v);
      continue;
    }
    const std::string &t = o.text;
    if (k == "host" || k == "vhost") {
      if (t.empty() || t.size() > 255 || Control(t)) return k;
      (k == "host" ? r.host : r.vhost) = t;
    } else if (k == "user") {
      if (t.empty() || Control(t)) return k;
      r.user = t;
    } else if (k == "password") {
      if (t.find('\0') != std::string::npos) return k;
      r.password = t;
    } else if (k == "exchange") {
      if (t.size() > 255 || Control(t)) return k;
      r.exchange = t;
    } else if (k == "tls" || k == "tls_verify") {
      if (t != "true" && t != "false") return k;
      (k == "tls" ? r.tls : r.tls_verify) = t == "true";
    } else {
      if (t.size() > (size_t{1} << 20) ||
          t.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
        return k;
      }
      r.tls_ca = t;
    }
    if (k == "tls_verify" || k == "tls_ca") tls_detail = k;
  }
  if (!tls_detail.empty() && !r.tls) return tls_detail;
  *out = r;
  return std::nullopt;
}

std::string Describe(const SinkOptions &options) {
  std::string s;
  for (const SinkOption &o : options) {
    s += (o.kind == Kind::kNumber  ? "n:"
          : o.kind == Kind::kOther ? "o:"
                                   : "s:") +
         o.key + "=" + o.text + " | ";
  }
  return s;
}

SinkOptions WriteBack(const AmqpOptions &r) {
  SinkOptions o = {{"host", Kind::kString, r.host},
                   {"vhost", Kind::kString, r.vhost},
                   {"user", Kind::kString, r.user},
                   {"password", Kind::kString, r.password},
                   {"exchange", Kind::kString, r.exchange},
                   {"tls", Kind::kString, r.tls ? "true" : "false"},
                   {"heartbeat", Kind::kNumber, std::to_string(r.heartbeat_s)},
                   {"connect_timeout_ms", Kind::kString, std::to_string(r.connect_timeout_ms)},
                   {"delivery_timeout_ms", Kind::kNumber, std::to_string(r.delivery_timeout_ms)}};
  if (r.port != 0) o.push_back({"port", Kind::kNumber, std::to_string(r.port)});
  if (r.tls) {
    o.push_back({"tls_verify", Kind::kString, r.tls_verify ? "true" : "false"});
    if (!r.tls_ca.empty()) o.push_back({"tls_ca", Kind::kString, r.tls_ca});
  }
  return o;
}

void ProveParseFollowsTheDocs(const SinkOptions &options) {
  AmqpOptions sentinel;
  sentinel.host = "untouched";
  sentinel.password = "untouched";
  AmqpOptions got = sentinel;
  const std::optional<std::string> err = ParseAmqpOptions(options, &got);
  AmqpOptions want;
  const std::optional<std::string> bad = RefParse(options, &want);

  if (err.has_value() != bad.has_value()) {
    Fail(err ? "rejected valid options" : "accepted invalid options", Describe(options));
  }
  if (ValidateAmqpOptions(options) != err) Fail("Validate and Parse disagree", Describe(options));
  if (err) {
    if (!Same(got, sentinel)) Fail("*out changed on error", Describe(options));
    if (err->find("\"" + *bad + "\"") == std::string::npos) {
      Fail("error message does not name the option", *err + " / " + Describe(options));
    }
    // The same options with every password replaced by a marker no other
    // option holds: the error never shows it (a password is valid whatever
    // its bytes but NUL, so the error is the same one).
    SinkOptions marked = options;
    bool any = false;
    for (SinkOption &o : marked) {
      if (o.key != "password" || o.kind != Kind::kString) continue;
      o.text = kMarker;
      any = true;
    }
    for (const SinkOption &o : options) {
      // The fuzzer learns the marker from the comparisons below and may set
      // it elsewhere: then its appearance proves nothing.
      if (o.key.find(kMarker) != std::string::npos || o.text.find(kMarker) != std::string::npos) {
        return;
      }
    }
    const std::optional<std::string> marked_err = any ? ParseAmqpOptions(marked, nullptr) : err;
    if (!marked_err || marked_err->find(kMarker) != std::string::npos) {
      Fail("error message quotes a password", marked_err.value_or("(accepted)"));
    }
    return;
  }
  if (!Same(got, want)) Fail("parsed values differ from the last values given", Describe(options));

  AmqpOptions again;
  const SinkOptions written = WriteBack(got);
  if (ParseAmqpOptions(written, &again) || !Same(again, got)) {
    Fail("accepted options do not round-trip", Describe(written));
  }
}

void ProveRoutingKeyRule(const SinkOptions &options) {
  for (const SinkOption &o : options) {
    const bool refused = CheckAmqpRoutingKey(o.text).has_value();
    if (refused != (o.text.size() > 255)) Fail("routing key rule", o.text);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SinkOptions options;
  if (!fuzz::DecodeOptionLines(data, size, &options)) return -1;  // -1: keep out of the corpus
  ProveParseFollowsTheDocs(options);
  ProveRoutingKeyRule(options);
  return 0;
}
