// The HTTP (webhook) sink's options, its URL template and route targets:
// what create_sink() accepts for kind 'http'. Plain values and plain
// functions: no libcurl here (create_sink() runs in a user's backend), no
// PostgreSQL header; fuzzed (test/fuzz/http_options_fuzz.cpp) and tested as
// tables (test/unit/http_options_test.cpp).
//
// Only superusers and the extension owner create sinks: the host a sink
// posts to is theirs to choose, and nothing else is. The URL is http or
// https only (for redirects too), carries no credentials, and the route's
// target lands only in its path, percent-encoded, never as "." or "..". No
// option names a file: a CA is given as PEM text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/message_format.hpp"
#include "core/sink_option.hpp"

namespace outbox {

struct HttpOptions {
  std::string url;  // the template, scheme in lower case; "{target}" marks where targets go
  bool url_has_target = false;  // else the target travels as header outbox-target
  std::vector<std::pair<std::string, std::string>> headers;  // static, in order
  int64_t timeout_ms = 10000;         // a whole request, from sending to its answer's end
  int64_t connect_timeout_ms = 5000;  // TCP and TLS handshakes
  int64_t max_connections = 16;       // kept-alive connections, all endpoints together
  bool tls_verify = true;             // the server's certificate and name
  std::optional<std::string> tls_ca;  // PEM text: the only authorities trusted
  bool follow_redirects = false;      // to http and https only, at most 5
  std::optional<std::string> secret;  // the signing key's bytes (decoded from whsec_)
  CloudEventsMode cloudevents_mode = CloudEventsMode::kBinary;  // option "format"
};

// Bounds, for the docs and the tests.
constexpr size_t kHttpMaxUrlBytes = 2048;
constexpr size_t kHttpMaxTargetBytes = 1024;
constexpr size_t kHttpMaxHeaders = 64;
constexpr int64_t kHttpMinTimeoutMs = 100;
constexpr int64_t kHttpMaxTimeoutMs = 300000;
constexpr int64_t kHttpMaxConnectTimeoutMs = 60000;
constexpr int64_t kHttpMaxConnections = 256;
constexpr size_t kHttpMinSecretBytes = 24;  // Standard Webhooks: 24 to 64 bytes
constexpr size_t kHttpMaxSecretBytes = 64;

// Options: url (required), method ("POST"), headers ("Name: value" lines
// separated by "\n"), timeout_ms, connect_timeout_ms, max_connections,
// tls_verify ("true"/"false"), tls_ca (PEM), follow_redirects
// ("true"/"false"), secret ("whsec_<base64>", may come from {"env": ...}),
// format ("binary" or "structured": how cloudevents routes travel). Values
// are JSON strings; the numbers also take JSON numbers. An unknown option is
// named with the valid ones; the secret is never quoted. Fills *out when
// valid (out may be null), leaves it alone otherwise.
std::optional<std::string> ParseHttpOptions(const SinkOptions &options, HttpOptions *out);

// What sink_factory calls: ParseHttpOptions without a result.
std::optional<std::string> ValidateHttpOptions(const SinkOptions &options);

// Why `target` cannot be a route's target on an HTTP sink, as a sentence;
// nothing when it can. A target is 1 to kHttpMaxTargetBytes bytes without
// control characters, path segments separated by single '/', none empty,
// "." or "..". The sink applies the same rule to every message's target (a
// route without a target sends to the event's topic, which an emit() role
// chooses).
std::optional<std::string> CheckHttpTarget(std::string_view target);

// The URL a message goes to: the template with each "{target}" replaced by
// the target, every byte but [A-Za-z0-9-._~] and '/' percent-encoded.
// `target` must pass CheckHttpTarget.
std::string ExpandHttpUrl(const HttpOptions &options, std::string_view target);

// Whether `name` is an HTTP header name (RFC 9110 token), and whether a
// header of that name is outbox's or the protocol's to set: Host,
// Content-Length, Content-Type, Transfer-Encoding, Connection and the other
// hop-by-hop headers, webhook-*, ce-* and outbox-* (any case, and with `_`
// for `-`: CGI-style receivers read webhook_signature as webhook-signature).
bool IsHttpToken(std::string_view name);
bool IsReservedHttpHeader(std::string_view name);

// Whether a header of that name is the sink owner's alone to send (option
// `headers`), never an event's: credentials (Authorization, Cookie), what
// says who sends (User-Agent, Origin, Forwarded, X-Forwarded-*, X-Real-IP)
// and what frameworks take for another method (X-HTTP-Method-Override and
// the like). A role that may only emit() must not make a receiver treat its
// POST as another request. Any case, `_` for `-`.
bool IsOwnerOnlyHttpHeader(std::string_view name);

// Whether `value` may travel as a header value: no CR, LF or NUL.
bool IsHttpHeaderValue(std::string_view value);

}  // namespace outbox
