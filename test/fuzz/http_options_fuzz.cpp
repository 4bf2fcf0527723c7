// Fuzz target: ParseHttpOptions, CheckHttpTarget, ExpandHttpUrl and the
// Standard Webhooks secret and signature on any options. Proves, for every
// input:
// - the result does not depend on whether *out is asked for;
// - an error names an option (one of the input's keys, or "url" when it is
//   missing, or "tls_ca" for the rule between it and tls_verify);
// - the error text does not depend on what the secret holds beyond whether
//   it decodes: the secret is never quoted;
// - an accepted configuration keeps the invariants that make the server
//   post only where its owner said: the URL is http:// or https://, holds
//   no credentials, no control characters or spaces, and {target} only in
//   its path; static headers are tokens, not reserved, with values free of
//   CR, LF and NUL; timeouts in range; a secret of 24 to 64 bytes, which
//   signs to "v1," and 44 base64 characters;
// - every option's text tried as a target: an accepted one, expanded into
//   the URL, adds no '?', '#', "/./" or "/../", nor any byte outside
//   [A-Za-z0-9-._~/%], so the target stays one path of the URL's host.
//
// Input: option lines (see option_lines.hpp), e.g.
// "surl=http://h/{target}\nsheaders=X-A: 1\nssecret=whsec_...".
#include "option_lines.hpp"
#include "sinks/http_options.hpp"
#include "sinks/http_signature.hpp"

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

// What an input was, for a failure's report.
std::string Describe(const SinkOptions &options) {
  std::string s;
  for (const SinkOption &o : options) s.append(o.key).append("=").append(o.text).append(" | ");
  return s;
}

[[noreturn]] void Fail(const char *what, const std::string &detail) {
  std::fprintf(stderr, "invariant failed: %s\n  %s\n", what, detail.c_str());
  std::abort();
}

void ProveUrl(const HttpOptions &o, const std::string &where) {
  const std::string &url = o.url;
  if (url.rfind("http://", 0) != 0 && url.rfind("https://", 0) != 0) Fail("scheme", where);
  const size_t host = url.find("://") + 3;
  const size_t path = url.find_first_of("/?#", host);
  const std::string authority = url.substr(host, path == std::string::npos ? path : path - host);
  if (authority.empty() || authority.find('@') != std::string::npos ||
      authority.find('{') != std::string::npos) {
    Fail("authority", where);
  }
  for (char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '\\') Fail("byte in url", where);
  }
  const size_t query = url.find('?');
  if (query != std::string::npos && url.find('{', query) != std::string::npos) {
    Fail("{ in the query", where);
  }
  if (url.find('#') != std::string::npos) Fail("fragment", where);
}

void ProveTarget(const HttpOptions &o, std::string_view target) {
  if (CheckHttpTarget(target)) return;
  const std::string plain = ExpandHttpUrl(o, "x");
  const std::string url = ExpandHttpUrl(o, target);
  if (!o.url_has_target) {
    if (url != o.url) Fail("a URL without {target} changed", url);
    return;
  }
  auto count = [](const std::string &s, char c) {
    size_t n = 0;
    for (char d : s) n += d == c;
    return n;
  };
  if (count(url, '?') != count(plain, '?') || count(url, '#') != count(plain, '#')) {
    Fail("a target added a query or a fragment", url);
  }
  const std::string wrapped = "/" + std::string(target) + "/";
  if (wrapped.find("/./") != std::string::npos || wrapped.find("/../") != std::string::npos) {
    Fail("accepted a dot segment", std::string(target));
  }
  for (char c : url) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) Fail("a target put a raw byte in the URL", url);
  }
}

void ProveAccepted(const SinkOptions &options, const HttpOptions &o) {
  const std::string where = Describe(options);
  ProveUrl(o, where);
  for (const auto &h : o.headers) {
    if (!IsHttpToken(h.first) || IsReservedHttpHeader(h.first) || !IsHttpHeaderValue(h.second)) {
      Fail("static header", where);
    }
  }
  if (o.timeout_ms < kHttpMinTimeoutMs || o.timeout_ms > kHttpMaxTimeoutMs ||
      o.connect_timeout_ms < kHttpMinTimeoutMs || o.connect_timeout_ms > kHttpMaxConnectTimeoutMs ||
      o.max_connections < 1 || o.max_connections > kHttpMaxConnections) {
    Fail("number out of range", where);
  }
  if (o.secret) {
    if (o.secret->size() < kHttpMinSecretBytes || o.secret->size() > kHttpMaxSecretBytes) {
      Fail("secret size", where);
    }
    const std::string signature = WebhookSignature(*o.secret, "id", 1, "body");
    if (signature.size() != 47 || signature.rfind("v1,", 0) != 0 ||
        DecodeBase64(signature.substr(3))->size() != 32) {
      Fail("signature shape", signature);
    }
  }
  for (const SinkOption &opt : options) ProveTarget(o, opt.text);
}

void ProveSecretNeverQuoted(const SinkOptions &options, const std::string &error) {
  SinkOptions respelled = options;
  bool changed = false;
  for (SinkOption &opt : respelled) {
    if (opt.key != "secret" || opt.kind != Kind::kString) continue;
    // Same validity: a decodable secret of the same length stays one.
    const bool valid = DecodeWebhookSecret(opt.text).has_value();
    const std::optional<std::string> bytes = DecodeWebhookSecret(opt.text);
    opt.text = valid ? "whsec_" + EncodeBase64(std::string(bytes->size(), 'Q'))
                     : std::string(opt.text.size(), '!');
    changed = true;
  }
  if (!changed) return;
  const std::optional<std::string> again = ParseHttpOptions(respelled, nullptr);
  if (!again || *again != error) {
    Fail("an error depends on the secret's content", error + " / " + Describe(options));
  }
}

void Prove(const SinkOptions &options) {
  HttpOptions got;
  const std::optional<std::string> error = ParseHttpOptions(options, &got);
  if (ParseHttpOptions(options, nullptr) != error) Fail("result depends on out", Describe(options));
  if (ValidateHttpOptions(options) != error) Fail("Validate disagrees", Describe(options));
  if (!error) {
    ProveAccepted(options, got);
    return;
  }
  bool named = error->find("option \"url\"") != std::string::npos ||
               error->find("option \"tls_ca\"") != std::string::npos;
  for (const SinkOption &o : options) {
    named = named || error->find("\"" + o.key + "\"") != std::string::npos;
  }
  if (!named) Fail("error names no option", *error + " / " + Describe(options));
  ProveSecretNeverQuoted(options, *error);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  SinkOptions options;
  if (!fuzz::DecodeOptionLines(data, size, &options)) return -1;
  Prove(options);
  return 0;
}
