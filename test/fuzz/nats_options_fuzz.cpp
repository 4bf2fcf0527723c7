// Fuzz target: ParseNatsOptions and CheckNatsSubject on any options.
// Proves, for every input:
// - the result does not depend on whether *out is asked for, and *out is
//   left alone on error;
// - an error names an option (one of the input's keys, or one of the
//   options the rules between options name);
// - the error text does not depend on what a secret (password, token) holds,
//   only on whether it is valid: no secret is ever quoted;
// - an accepted configuration keeps the contract's invariants (servers
//   listed with valid ports, timeouts in range, user with password, token
//   alone, TLS with a host name to check) and round-trips: written back as
//   options it parses to itself;
// - a subject CheckNatsSubject accepts is literal, printable and has no
//   empty token (every option's text is tried as a subject too).
//
// Input: option lines (see option_lines.hpp), e.g.
// "sservers=nats://a:1,tls://a\nsuser=u\nspassword=p".
#include "option_lines.hpp"
#include "sinks/nats_options.hpp"

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
    s += (o.kind == Kind::kNumber  ? "n:"
          : o.kind == Kind::kOther ? "o:"
                                   : "s:") +
         o.key + "=" + o.text + " | ";
  }
  return s;
}

bool Same(const NatsOptions &a, const NatsOptions &b) {
  if (a.servers.size() != b.servers.size()) return false;
  for (size_t i = 0; i < a.servers.size(); ++i) {
    if (a.servers[i].host != b.servers[i].host || a.servers[i].port != b.servers[i].port) {
      return false;
    }
  }
  return a.user == b.user && a.password == b.password && a.token == b.token && a.tls == b.tls &&
         a.tls_hostname == b.tls_hostname && a.connect_timeout_ms == b.connect_timeout_ms &&
         a.ack_timeout_ms == b.ack_timeout_ms;
}

SinkOptions WriteBack(const NatsOptions &o) {
  std::string servers;
  for (const NatsServer &s : o.servers) servers += (servers.empty() ? "" : ",") + NatsServerUrl(s);
  SinkOptions out = {{"servers", Kind::kString, servers},
                     {"tls", Kind::kString, o.tls ? "true" : "false"},
                     {"connect_timeout_ms", Kind::kNumber, std::to_string(o.connect_timeout_ms)},
                     {"ack_timeout_ms", Kind::kString, std::to_string(o.ack_timeout_ms)}};
  if (o.user) out.push_back({"user", Kind::kString, *o.user});
  if (o.password) out.push_back({"password", Kind::kString, *o.password});
  if (o.token) out.push_back({"token", Kind::kString, *o.token});
  if (o.tls_hostname) out.push_back({"tls_hostname", Kind::kString, *o.tls_hostname});
  return out;
}

// The same secret in another spelling that is valid or invalid alike: every
// ordinary character replaced, the ones that make it invalid kept.
std::string OtherSpelling(const std::string &secret) {
  std::string other = secret;
  for (char &c : other) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || u < 0x20 || u == 0x7f) continue;
    c = c == 'Q' ? 'Z' : 'Q';
  }
  return other;
}

void ProveErrorsNeverQuoteSecrets(const SinkOptions &options, const std::string &error) {
  SinkOptions respelled = options;
  bool changed = false;
  for (SinkOption &o : respelled) {
    if ((o.key == "password" || o.key == "token") && o.kind == Kind::kString) {
      o.text = OtherSpelling(o.text);
      changed = true;
    }
  }
  if (!changed) return;
  const std::optional<std::string> again = ParseNatsOptions(respelled, nullptr);
  if (!again || *again != error) {
    Fail("an error depends on a secret's content", error + " / " + Describe(options));
  }
}

void ProveAcceptedKeepsInvariants(const SinkOptions &options, const NatsOptions &o) {
  const std::string where = Describe(options);
  if (o.servers.empty() || o.servers.size() > kNatsMaxServers) Fail("server count", where);
  for (const NatsServer &s : o.servers) {
    if (s.host.empty() || s.port < 1 || s.port > 65535) Fail("server out of range", where);
  }
  if (o.connect_timeout_ms < kNatsMinTimeoutMs || o.connect_timeout_ms > kNatsMaxConnectTimeoutMs ||
      o.ack_timeout_ms < kNatsMinTimeoutMs || o.ack_timeout_ms > kNatsMaxAckTimeoutMs) {
    Fail("timeout out of range", where);
  }
  if (o.user.has_value() != o.password.has_value()) Fail("user without password", where);
  if (o.token && o.user) Fail("token with user", where);
  if (o.tls != o.tls_hostname.has_value()) Fail("TLS without a host name, or the reverse", where);
  NatsOptions again;
  const SinkOptions written = WriteBack(o);
  if (ParseNatsOptions(written, &again) || !Same(again, o)) {
    Fail("accepted options do not round-trip", Describe(written));
  }
}

void ProveSubjectRule(std::string_view subject) {
  if (CheckNatsSubject(subject)) return;
  if (subject.empty() || subject.size() > kNatsMaxSubjectBytes || subject.front() == '.' ||
      subject.back() == '.' || subject.find("..") != std::string_view::npos) {
    Fail("accepted a subject with an empty token or of a bad length", std::string(subject));
  }
  for (char c : subject) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '*' || c == '>') {
      Fail("accepted a subject with a wildcard or a non-printable byte", std::string(subject));
    }
  }
  const std::string_view first = subject.substr(0, subject.find('.'));
  if (first == "$JS" || first == "$SYS") Fail("accepted the server's API", std::string(subject));
}

void Prove(const SinkOptions &options) {
  NatsOptions sentinel;
  sentinel.servers = {NatsServer{"untouched", 1}};
  sentinel.token = "untouched";
  NatsOptions got = sentinel;
  const std::optional<std::string> error = ParseNatsOptions(options, &got);
  if (ParseNatsOptions(options, nullptr) != error) Fail("result depends on out", Describe(options));
  if (ValidateNatsOptions(options) != error) Fail("Validate disagrees", Describe(options));
  for (const SinkOption &o : options) ProveSubjectRule(o.text);
  if (!error) {
    ProveAcceptedKeepsInvariants(options, got);
    return;
  }
  if (!Same(got, sentinel)) Fail("*out changed on error", Describe(options));
  bool named = false;
  for (const SinkOption &o : options)
    named = named || error->find("\"" + o.key + "\"") != std::string::npos;
  for (const char *rule : {"\"user\"", "\"password\"", "\"tls\"", "\"tls_hostname\""}) {
    named = named || error->find(rule) != std::string::npos;
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
