// The HTTP sink's options, URL template and targets (http_options.hpp).
#include "sinks/http_options.hpp"

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "sinks/http_signature.hpp"

namespace outbox {

namespace {

constexpr const char *kValidOptions =
    "url, method, headers, timeout_ms, connect_timeout_ms, max_connections, tls_verify, tls_ca, "
    "follow_redirects, secret, format";
constexpr std::string_view kTargetMark = "{target}";
// A trust store of a few certificates is a few kilobytes.
constexpr size_t kMaxCaBytes = size_t{1} << 20;

std::string Named(std::string_view key) { return "option \"" + std::string(key) + "\""; }

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool IsHexDigit(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

bool StartsWithIgnoringCase(std::string_view text, std::string_view prefix) {
  if (text.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (Lower(text[i]) != prefix[i]) return false;
  }
  return true;
}

bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

// A whole number: a string of decimal digits or a JSON number without a
// fraction (2000.0 is 2000); nothing otherwise, or beyond 18 digits.
std::optional<int64_t> WholeNumber(const SinkOption &opt) {
  std::string_view text = opt.text;
  const size_t dot = text.find('.');
  if (opt.kind == SinkOption::Kind::kNumber && dot != std::string_view::npos &&
      dot + 1 < text.size() && text.find_first_not_of('0', dot + 1) == std::string_view::npos) {
    text = text.substr(0, dot);
  }
  if (text.empty() || text.size() > 18) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

// host[:port] of an http(s) URL: a name, an IPv4 address or a bracketed
// IPv6 address; no user information (credentials belong in no URL that
// error messages may show).
std::optional<std::string> CheckAuthority(std::string_view authority) {
  if (authority.find('@') != std::string_view::npos) {
    return std::string("must not hold credentials (user@host): give them as a header");
  }
  std::string_view host = authority;
  std::string_view port;
  if (!host.empty() && host.front() == '[') {
    const size_t close = host.find(']');
    if (close == std::string_view::npos) return std::string("has an unclosed '[' in its host");
    for (char c : host.substr(1, close - 1)) {
      if (!IsAlnum(c) && c != ':' && c != '.') return std::string("has a bad IPv6 address");
    }
    const std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return std::string("has a bad host[:port]");
    if (!rest.empty()) port = rest.substr(1);
    host = host.substr(0, close + 1);
    if (host.size() < 3) return std::string("has no host");
  } else {
    const size_t colon = host.find(':');
    if (colon != std::string_view::npos) {
      port = host.substr(colon + 1);
      host = host.substr(0, colon);
      if (port.empty()) return std::string("has an empty port");
    }
    if (host.empty() || host.size() > 253) return std::string("has no host");
    for (char c : host) {
      if (!IsAlnum(c) && c != '.' && c != '-' && c != '_') {
        return std::string("has a host that is not a name or an address");
      }
    }
  }
  if (!port.empty()) {
    int64_t number = 0;
    for (char c : port) {
      if (c < '0' || c > '9' || number > 65535) return std::string("has a bad port");
      number = number * 10 + (c - '0');
    }
    if (port.size() > 5 || number < 1 || number > 65535) {
      return std::string("has a port outside 1 to 65535");
    }
  }
  return std::nullopt;
}

std::optional<std::string> ParseUrl(std::string_view text, HttpOptions *r) {
  if (text.empty() || text.size() > kHttpMaxUrlBytes) {
    return Named("url") + " must be 1 to " + std::to_string(kHttpMaxUrlBytes) + " bytes";
  }
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f || c == '\\' || c == '"' || c == '<' || c == '>' || c == '`' ||
        c == '^' || c == '|') {
      return Named("url") + " must be printable ASCII without spaces, quotes or backslashes";
    }
  }
  std::string scheme;
  if (StartsWithIgnoringCase(text, "https://")) {
    scheme = "https://";
  } else if (StartsWithIgnoringCase(text, "http://")) {
    scheme = "http://";
  } else {
    return Named("url") + " must start with http:// or https:// (no other scheme is allowed)";
  }
  const std::string_view rest = text.substr(scheme.size());
  const size_t authority_end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, authority_end);
  if (std::optional<std::string> bad = CheckAuthority(authority)) {
    return Named("url") + " " + *bad;
  }
  const std::string_view tail =
      authority_end == std::string_view::npos ? std::string_view() : rest.substr(authority_end);
  if (tail.find('#') != std::string_view::npos) return Named("url") + " must not hold a fragment";
  const size_t query = tail.find('?');
  const std::string_view path = tail.substr(0, query);
  const std::string_view after =
      query == std::string_view::npos ? std::string_view() : tail.substr(query);
  if (after.find_first_of("{}") != std::string_view::npos) {
    return Named("url") + " may hold {target} only in its path, not in its query";
  }
  // Every '%' begins an escape of its own: one left open before {target}
  // would take the target's first bytes as its digits ("%2" + "e." is
  // "%2e.", which a receiver decodes to "..").
  for (size_t i = 0; i < tail.size(); ++i) {
    if (tail[i] != '%') continue;
    if (i + 2 >= tail.size() || !IsHexDigit(tail[i + 1]) || !IsHexDigit(tail[i + 2])) {
      return Named("url") + " holds a '%' that is not followed by two hex digits";
    }
  }
  bool has_target = false;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '}') return Named("url") + " holds a '}' outside {target}";
    if (path[i] != '{') continue;
    if (path.substr(i, kTargetMark.size()) != kTargetMark) {
      return Named("url") + " holds a '{' that does not begin {target}";
    }
    has_target = true;
    i += kTargetMark.size() - 1;
  }
  r->url = scheme + std::string(rest);
  r->url_has_target = has_target;
  return std::nullopt;
}

bool IsTokenChar(char c) {
  static constexpr std::string_view kMarks = "!#$%&'*+-.^_`|~";
  return IsAlnum(c) || kMarks.find(c) != std::string_view::npos;
}

std::optional<std::string> ParseHeaders(std::string_view text, HttpOptions *r) {
  r->headers.clear();
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = text.find('\n', start);
    const std::string_view line =
        text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    start = end == std::string_view::npos ? text.size() + 1 : end + 1;
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    if (colon == std::string_view::npos || !IsHttpToken(name)) {
      return Named("headers") + " must be lines of \"Name: value\", each name an HTTP token";
    }
    if (IsReservedHttpHeader(name)) {
      return Named("headers") + " must not set header " + std::string(name) +
             " (the protocol's or outbox's own)";
    }
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (!IsHttpHeaderValue(value)) {
      return Named("headers") + " has a value with CR, LF or NUL in header " + std::string(name);
    }
    if (r->headers.size() == kHttpMaxHeaders) {
      return Named("headers") + " holds more than " + std::to_string(kHttpMaxHeaders) + " headers";
    }
    r->headers.emplace_back(std::string(name), std::string(value));
  }
  return std::nullopt;
}

std::optional<std::string> ParseFlag(const SinkOption &opt, bool *out) {
  if (opt.text == "true" || opt.text == "false") {
    *out = opt.text == "true";
    return std::nullopt;
  }
  return Named(opt.key) + " must be \"true\" or \"false\"";
}

std::optional<std::string> ParseNumber(const SinkOption &opt, int64_t min, int64_t max,
                                       int64_t *out) {
  const std::optional<int64_t> v = WholeNumber(opt);
  if (!v || *v < min || *v > max) {
    return Named(opt.key) + " must be an integer between " + std::to_string(min) + " and " +
           std::to_string(max);
  }
  *out = *v;
  return std::nullopt;
}

std::optional<std::string> Apply(const SinkOption &opt, HttpOptions *r, bool *has_url) {
  const std::string &key = opt.key;
  const std::string &text = opt.text;
  if (key == "timeout_ms")
    return ParseNumber(opt, kHttpMinTimeoutMs, kHttpMaxTimeoutMs, &r->timeout_ms);
  if (key == "connect_timeout_ms") {
    return ParseNumber(opt, kHttpMinTimeoutMs, kHttpMaxConnectTimeoutMs, &r->connect_timeout_ms);
  }
  if (key == "max_connections") {
    return ParseNumber(opt, 1, kHttpMaxConnections, &r->max_connections);
  }
  if (opt.kind == SinkOption::Kind::kNumber) return Named(key) + " must be a JSON string";
  if (key == "url") {
    *has_url = true;
    return ParseUrl(text, r);
  }
  if (key == "method") {
    if (text != "POST") return Named(key) + " must be \"POST\"";
    return std::nullopt;
  }
  if (key == "headers") return ParseHeaders(text, r);
  if (key == "tls_verify") return ParseFlag(opt, &r->tls_verify);
  if (key == "follow_redirects") return ParseFlag(opt, &r->follow_redirects);
  if (key == "tls_ca") {
    if (text.size() > kMaxCaBytes ||
        text.find("-----BEGIN CERTIFICATE-----") == std::string::npos ||
        text.find('\0') != std::string::npos) {
      return Named(key) +
             " must be PEM text holding -----BEGIN CERTIFICATE----- (never a file's name), at "
             "most 1 MiB";
    }
    r->tls_ca = text;
    return std::nullopt;
  }
  if (key == "secret") {
    // Never quoted: a secret.
    std::optional<std::string> bytes = DecodeWebhookSecret(text);
    if (!bytes || bytes->size() < kHttpMinSecretBytes || bytes->size() > kHttpMaxSecretBytes) {
      return Named(key) + " must be \"whsec_\" followed by the base64 of " +
             std::to_string(kHttpMinSecretBytes) + " to " + std::to_string(kHttpMaxSecretBytes) +
             " bytes";
    }
    r->secret = std::move(*bytes);
    return std::nullopt;
  }
  if (text == "binary" || text == "structured") {  // key == "format"
    r->cloudevents_mode =
        text == "binary" ? CloudEventsMode::kBinary : CloudEventsMode::kStructured;
    return std::nullopt;
  }
  return Named(key) + " must be \"binary\" or \"structured\"";
}

bool IsKnown(std::string_view key) {
  return key == "url" || key == "method" || key == "headers" || key == "timeout_ms" ||
         key == "connect_timeout_ms" || key == "max_connections" || key == "tls_verify" ||
         key == "tls_ca" || key == "follow_redirects" || key == "secret" || key == "format";
}

}  // namespace

std::optional<std::string> ParseHttpOptions(const SinkOptions &options, HttpOptions *out) {
  HttpOptions r;
  bool has_url = false;
  for (const SinkOption &opt : options) {
    if (!IsKnown(opt.key)) {
      return "unknown option \"" + opt.key + "\" (valid: " + kValidOptions + ")";
    }
    if (opt.kind == SinkOption::Kind::kUnresolved) return Named(opt.key) + " " + opt.text;
    if (opt.kind == SinkOption::Kind::kOther) return Named(opt.key) + " must be a JSON string";
    if (std::optional<std::string> bad = Apply(opt, &r, &has_url)) return bad;
  }
  if (!has_url) return Named("url") + " is required (http:// or https://)";
  if (r.tls_ca && !r.tls_verify) {
    return Named("tls_ca") + " applies only with tls_verify \"true\"";
  }
  if (out != nullptr) *out = std::move(r);
  return std::nullopt;
}

std::optional<std::string> ValidateHttpOptions(const SinkOptions &options) {
  return ParseHttpOptions(options, nullptr);
}

std::optional<std::string> CheckHttpTarget(std::string_view target) {
  if (target.empty() || target.size() > kHttpMaxTargetBytes) {
    return "An HTTP target is 1 to " + std::to_string(kHttpMaxTargetBytes) + " bytes.";
  }
  for (char c : target) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return std::string("An HTTP target holds no control characters.");
  }
  size_t start = 0;
  for (;;) {
    const size_t slash = target.find('/', start);
    const std::string_view segment = target.substr(
        start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (segment.empty() || segment == "." || segment == "..") {
      return std::string(
          "An HTTP target is path segments separated by single '/', none of them empty, \".\" "
          "or \"..\".");
    }
    if (slash == std::string_view::npos) return std::nullopt;
    start = slash + 1;
  }
}

std::string ExpandHttpUrl(const HttpOptions &options, std::string_view target) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string encoded;
  encoded.reserve(target.size() * 3);
  for (char c : target) {
    if (IsAlnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      encoded.push_back(c);
    } else {
      const auto u = static_cast<unsigned char>(c);
      encoded.push_back('%');
      encoded.push_back(kHex[u >> 4]);
      encoded.push_back(kHex[u & 15]);
    }
  }
  std::string url;
  const std::string &tpl = options.url;
  size_t start = 0;
  for (;;) {
    const size_t mark = tpl.find(kTargetMark, start);
    if (mark == std::string::npos) break;
    url.append(tpl, start, mark - start);
    url += encoded;
    start = mark + kTargetMark.size();
  }
  url.append(tpl, start, std::string::npos);
  return url;
}

bool IsHttpToken(std::string_view name) {
  if (name.empty() || name.size() > 256) return false;
  for (char c : name) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

namespace {

// A header name as receivers may compare it: lower case, and `_` read as
// `-` (CGI, WSGI, Rack and PHP map both to the same HTTP_* variable).
std::string Folded(std::string_view name) {
  std::string folded;
  folded.reserve(name.size());
  for (char c : name) folded.push_back(c == '_' ? '-' : Lower(c));
  return folded;
}

bool IsOneOf(const std::string &folded, std::initializer_list<std::string_view> names) {
  for (std::string_view n : names) {
    if (folded == n) return true;
  }
  return false;
}

}  // namespace

bool IsReservedHttpHeader(std::string_view name) {
  const std::string folded = Folded(name);
  if (IsOneOf(folded, {"host", "content-length", "content-type", "transfer-encoding", "connection",
                       "upgrade", "keep-alive", "te", "trailer", "expect", "proxy-connection",
                       "proxy-authorization"})) {
    return true;
  }
  return StartsWithIgnoringCase(folded, "webhook-") || StartsWithIgnoringCase(folded, "ce-") ||
         StartsWithIgnoringCase(folded, "outbox-") || (!folded.empty() && folded.front() == ':');
}

bool IsOwnerOnlyHttpHeader(std::string_view name) {
  const std::string folded = Folded(name);
  return IsOneOf(folded,
                 {"authorization", "cookie", "user-agent", "origin", "referer", "forwarded",
                  "x-real-ip", "x-http-method-override", "x-http-method", "x-method-override",
                  "x-original-method", "x-original-url", "x-rewrite-url"}) ||
         StartsWithIgnoringCase(folded, "x-forwarded-") || StartsWithIgnoringCase(folded, "proxy-");
}

bool IsHttpHeaderValue(std::string_view value) {
  return value.find_first_of(std::string_view("\r\n\0", 3)) == std::string_view::npos;
}

}  // namespace outbox
