// Fuzz target: ParseMqttOptions and CheckMqttTopic on any options.
// Proves, for every input:
// - the result does not depend on whether *out is asked for, and *out is
//   left alone on error;
// - an error names an option (one of the input's keys, or one the rules
//   between options name);
// - the error text does not depend on what the password holds, only on
//   whether it is valid: the secret is never quoted;
// - an accepted configuration keeps its invariants (ports, QoS, protocol,
//   keepalive, timeouts and connections in range; a password only with a user; a CA only
//   with TLS, and PEM text, never a file name) and round-trips: written back
//   as options it parses to itself;
// - a topic CheckMqttTopic accepts has no wildcard, no NUL or control byte,
//   no empty level and a bounded length (every option's text is tried as a
//   topic too).
//
// Input: option lines (see option_lines.hpp), e.g.
// "shost=broker\nnqos=2\nsuser=u\nspassword=p".
#include "option_lines.hpp"
#include "sinks/mqtt_options.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace {

using namespace outbox;
using Kind = SinkOption::Kind;

void Fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "invariant failed: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

std::string Describe(const SinkOptions &options) {
  std::string s;
  for (const SinkOption &o : options) {
    s += std::string(o.kind == Kind::kNumber  ? "n:"
                     : o.kind == Kind::kOther ? "o:"
                                              : "s:") +
         o.key + "=" + o.text + " | ";
  }
  return s;
}

bool Same(const MqttOptions &a, const MqttOptions &b) {
  return a.host == b.host && a.port == b.port && a.client_id == b.client_id && a.user == b.user &&
         a.password == b.password && a.tls == b.tls && a.tls_verify == b.tls_verify &&
         a.tls_ca == b.tls_ca && a.keepalive_s == b.keepalive_s && a.protocol == b.protocol &&
         a.qos == b.qos && a.retain == b.retain && a.connect_timeout_ms == b.connect_timeout_ms &&
         a.ack_timeout_ms == b.ack_timeout_ms && a.connections == b.connections;
}

SinkOptions WriteBack(const MqttOptions &o) {
  const auto flag = [](bool v) { return std::string(v ? "true" : "false"); };
  SinkOptions out = {{"host", Kind::kString, o.host},
                     {"client_id", Kind::kString, o.client_id},
                     {"tls", Kind::kString, flag(o.tls)},
                     {"keepalive", Kind::kNumber, std::to_string(o.keepalive_s)},
                     {"protocol", Kind::kString, o.protocol == 5 ? "5" : "3.1.1"},
                     {"qos", Kind::kString, std::to_string(o.qos)},
                     {"retain", Kind::kString, flag(o.retain)},
                     {"connect_timeout_ms", Kind::kNumber, std::to_string(o.connect_timeout_ms)},
                     {"ack_timeout_ms", Kind::kString, std::to_string(o.ack_timeout_ms)},
                     {"connections", Kind::kNumber, std::to_string(o.connections)}};
  if (o.port != 0) out.push_back({"port", Kind::kNumber, std::to_string(o.port)});
  if (o.user) out.push_back({"user", Kind::kString, *o.user});
  if (o.password) out.push_back({"password", Kind::kString, *o.password});
  if (o.tls) out.push_back({"tls_verify", Kind::kString, flag(o.tls_verify)});
  if (!o.tls_ca.empty()) out.push_back({"tls_ca", Kind::kString, o.tls_ca});
  return out;
}

// The same secret in another spelling that is valid or invalid alike: every
// ordinary byte replaced, NUL kept (the only byte that makes it invalid
// besides its length).
std::string OtherSpelling(const std::string &secret) {
  std::string other = secret;
  for (char &c : other) {
    if (c != '\0') c = c == 'Q' ? 'Z' : 'Q';
  }
  return other;
}

void ProveErrorsNeverQuoteSecrets(const SinkOptions &options, const std::string &error) {
  SinkOptions respelled = options;
  bool changed = false;
  for (SinkOption &o : respelled) {
    if (o.key == "password" && o.kind == Kind::kString) {
      o.text = OtherSpelling(o.text);
      changed = true;
    }
  }
  if (!changed) return;
  // A password also written under another key (qos=<secret>) is that key's
  // value, which may be quoted: only compare when no other value equals it.
  for (const SinkOption &o : options) {
    if (o.key != "password" && o.kind == Kind::kString) {
      for (const SinkOption &p : options) {
        if (p.key == "password" && !p.text.empty() && o.text.find(p.text) != std::string::npos) {
          return;
        }
      }
    }
  }
  const std::optional<std::string> again = ParseMqttOptions(respelled, nullptr);
  if (!again || *again != error) {
    Fail("an error depends on a secret's content", error + " / " + Describe(options));
  }
}

void ProveAcceptedKeepsInvariants(const SinkOptions &options, const MqttOptions &o) {
  const std::string where = Describe(options);
  if (o.EffectivePort() < 1 || o.EffectivePort() > 65535) Fail("port out of range", where);
  if (o.qos != 1 && o.qos != 2) Fail("qos out of range", where);
  if (o.protocol != 5 && o.protocol != 311) Fail("unknown protocol", where);
  if (o.keepalive_s < 5 || o.keepalive_s > 65535) Fail("keepalive out of range", where);
  if (o.connections < 1 || o.connections > kMqttMaxConnections) {
    Fail("connections out of range", where);
  }
  if (o.connect_timeout_ms < kMqttMinTimeoutMs || o.connect_timeout_ms > kMqttMaxConnectTimeoutMs ||
      o.ack_timeout_ms < kMqttMinTimeoutMs || o.ack_timeout_ms > kMqttMaxAckTimeoutMs) {
    Fail("timeout out of range", where);
  }
  if (o.password && !o.user) Fail("password without user", where);
  if (o.host.empty() || o.client_id.empty() || o.client_id.size() > kMqttMaxClientIdPrefix) {
    Fail("empty host or bad client id", where);
  }
  if (!o.tls_ca.empty() &&
      (!o.tls || o.tls_ca.find("-----BEGIN CERTIFICATE-----") == std::string::npos)) {
    Fail("a CA without TLS, or not PEM text", where);
  }
  MqttOptions again;
  const SinkOptions written = WriteBack(o);
  if (ParseMqttOptions(written, &again) || !Same(again, o)) {
    Fail("accepted options do not round-trip", Describe(written));
  }
}

void ProveTopicRule(std::string_view topic) {
  if (CheckMqttTopic(topic)) return;
  const std::string shown(topic);
  if (topic.empty() || topic.size() > kMqttMaxTopicBytes || topic.front() == '/' ||
      topic.back() == '/' || topic.find("//") != std::string_view::npos) {
    Fail("accepted a topic with an empty level or of a bad length", shown);
  }
  if (topic.front() == '$') Fail("accepted a broker topic", shown);
  for (const char c : topic) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f || c == '+' || c == '#') {
      Fail("accepted a topic with a wildcard or a control byte", shown);
    }
  }
}

void Prove(const SinkOptions &options) {
  MqttOptions sentinel;
  sentinel.host = "untouched";
  sentinel.user = "untouched";
  MqttOptions got = sentinel;
  const std::optional<std::string> error = ParseMqttOptions(options, &got);
  if (ParseMqttOptions(options, nullptr) != error) Fail("result depends on out", Describe(options));
  if (ValidateMqttOptions(options) != error) Fail("Validate disagrees", Describe(options));
  for (const SinkOption &o : options) ProveTopicRule(o.text);
  if (!error) {
    ProveAcceptedKeepsInvariants(options, got);
    return;
  }
  if (!Same(got, sentinel)) Fail("*out changed on error", Describe(options));
  bool named = false;
  for (const SinkOption &o : options) {
    named = named || error->find("\"" + o.key + "\"") != std::string::npos;
  }
  if (!named) Fail("error names no option", *error + " / " + Describe(options));
  ProveErrorsNeverQuoteSecrets(options, *error);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SinkOptions options;
  if (!fuzz::DecodeOptionLines(data, size, &options)) return -1;  // -1: keep out of the corpus
  Prove(options);
  return 0;
}
