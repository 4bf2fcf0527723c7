// The NATS sink's options and subjects (nats_options.hpp).
#include "sinks/nats_options.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace outbox {

namespace {

constexpr const char *kValidOptions =
    "servers, user, password, token, tls, tls_hostname, connect_timeout_ms, ack_timeout_ms";

std::string Quoted(std::string_view key) { return "\"" + std::string(key) + "\""; }

std::string OptionError(std::string_view key, std::string_view what) {
  return "option " + Quoted(key) + " " + std::string(what);
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool IsHostNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || IsDigit(c) || c == '.' || c == '-' ||
         c == '_';
}

// An integer option: a JSON number (an integral one may be written 2000.0)
// or a string of plain decimal digits; nothing when it is neither or does
// not fit in int64.
std::optional<int64_t> ParseInteger(const SinkOption &opt) {
  std::string_view text = opt.text;
  if (opt.kind == SinkOption::Kind::kNumber) {
    const size_t dot = text.find('.');
    if (dot != std::string_view::npos) {
      const std::string_view fraction = text.substr(dot + 1);
      if (fraction.empty() || fraction.find_first_not_of('0') != std::string_view::npos) {
        return std::nullopt;
      }
      text = text.substr(0, dot);
    }
  }
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty() || text.size() > 18) return std::nullopt;  // 18 digits always fit
  int64_t value = 0;
  for (char c : text) {
    if (!IsDigit(c)) return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return negative ? -value : value;
}

// A credential libnats puts between double quotes in its CONNECT line
// without escaping: quotes, backslashes and control characters would break
// the line (or add fields to it).
bool SafeCredential(std::string_view text) {
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\' || u < 0x20 || u == 0x7f) return false;
  }
  return true;
}

bool IsIpLiteral(std::string_view host) {
  if (host.find(':') != std::string_view::npos) return true;  // IPv6
  if (host.empty()) return false;
  for (char c : host) {
    if (!IsDigit(c) && c != '.') return false;
  }
  return true;
}

// One item of "servers": [scheme://]host[:port]. Never quotes the item
// before knowing it holds no credentials.
std::optional<std::string> ParseServer(std::string_view item, NatsServer *out, bool *tls) {
  while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
  while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
  if (item.empty()) return std::string("holds an empty server address");
  if (item.find('@') != std::string_view::npos) {
    return std::string(
        "holds credentials in a server address: give them as options user and password, or "
        "token");
  }
  const std::string shown = Quoted(item);
  *tls = false;
  const size_t scheme_end = item.find("://");
  if (scheme_end != std::string_view::npos) {
    std::string scheme;
    for (char c : item.substr(0, scheme_end)) scheme.push_back(Lower(c));
    if (scheme == "tls") {
      *tls = true;
    } else if (scheme != "nats") {
      return "has " + shown + ": the scheme must be nats:// or tls://";
    }
    item.remove_prefix(scheme_end + 3);
  }
  for (char c : item) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '/' || c == '?' || c == '#' || u <= 0x20 || u >= 0x7f) {
      return "has " + shown + ": a server address is host[:port], nothing more";
    }
  }
  std::string_view host;
  std::string_view port;
  bool has_port = false;
  if (!item.empty() && item.front() == '[') {
    const size_t close = item.find(']');
    if (close == std::string_view::npos) return "has " + shown + ": an unclosed '['";
    host = item.substr(1, close - 1);
    for (char c : host) {
      const bool hex = IsDigit(c) || (Lower(c) >= 'a' && Lower(c) <= 'f');
      if (!hex && c != ':' && c != '.') {
        return "has " + shown + ": not an IPv6 address in brackets";
      }
    }
    if (host.find(':') == std::string_view::npos) {
      return "has " + shown + ": not an IPv6 address in brackets";
    }
    const std::string_view rest = item.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return "has " + shown + ": a server address is host[:port]";
      port = rest.substr(1);
      has_port = true;
    }
  } else {
    const size_t colon = item.find(':');
    if (colon != std::string_view::npos && item.find(':', colon + 1) != std::string_view::npos) {
      return "has " + shown + ": an IPv6 address goes in brackets, e.g. [::1]:4222";
    }
    host = item.substr(0, colon);
    if (colon != std::string_view::npos) {
      port = item.substr(colon + 1);
      has_port = true;
    }
    for (char c : host) {
      if (!IsHostNameChar(c)) return "has " + shown + ": not a host name or address";
    }
  }
  if (host.empty() || host.size() > 253) return "has " + shown + ": no host";
  int port_number = 4222;
  if (has_port) {
    if (port.empty() || port.size() > 5) return "has " + shown + ": a port is 1 to 65535";
    port_number = 0;
    for (char c : port) {
      if (!IsDigit(c)) return "has " + shown + ": a port is 1 to 65535";
      port_number = port_number * 10 + (c - '0');
    }
    if (port_number < 1 || port_number > 65535) {
      return "has " + shown + ": a port is 1 to 65535";
    }
  }
  out->host = std::string(host);
  out->port = port_number;
  return std::nullopt;
}

std::optional<std::string> ParseServers(std::string_view text, NatsOptions *out, bool *any_tls) {
  std::vector<NatsServer> servers;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string_view item = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (servers.size() == kNatsMaxServers) {
      return OptionError("servers",
                         "lists more than " + std::to_string(kNatsMaxServers) + " servers");
    }
    NatsServer server;
    bool tls = false;
    if (std::optional<std::string> bad = ParseServer(item, &server, &tls)) {
      return OptionError("servers", *bad);
    }
    *any_tls = *any_tls || tls;
    servers.push_back(std::move(server));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  out->servers = std::move(servers);
  return std::nullopt;
}

}  // namespace

std::optional<std::string> ParseNatsOptions(const SinkOptions &options, NatsOptions *out) {
  NatsOptions r;
  bool tls_scheme = false;
  std::optional<bool> tls_option;
  for (const SinkOption &opt : options) {
    const std::string &key = opt.key;
    const bool timeout = key == "connect_timeout_ms" || key == "ack_timeout_ms";
    if (key != "servers" && key != "user" && key != "password" && key != "token" && key != "tls" &&
        key != "tls_hostname" && !timeout) {
      return "unknown option " + Quoted(key) + " (valid: " + kValidOptions + ")";
    }
    if (opt.kind == SinkOption::Kind::kUnresolved) return OptionError(key, opt.text);
    if (opt.kind == SinkOption::Kind::kOther ||
        (opt.kind == SinkOption::Kind::kNumber && !timeout)) {
      return OptionError(key,
                         timeout ? "must be a JSON string or number" : "must be a JSON string");
    }
    if (key == "servers") {
      tls_scheme = false;  // the last "servers" decides, as for every option
      if (std::optional<std::string> bad = ParseServers(opt.text, &r, &tls_scheme)) return bad;
    } else if (key == "user" || key == "password" || key == "token") {
      // Never quote the value: password and token are secrets.
      if (opt.text.empty()) return OptionError(key, "must not be empty");
      if (!SafeCredential(opt.text)) {
        return OptionError(key,
                           "must not hold double quotes, backslashes or control characters "
                           "(libnats sends it unescaped)");
      }
      (key == "user" ? r.user : key == "password" ? r.password : r.token) = opt.text;
    } else if (key == "tls") {
      if (opt.text == "true") {
        tls_option = true;
      } else if (opt.text == "false") {
        tls_option = false;
      } else {
        return OptionError(key, "must be \"true\" or \"false\", not " + Quoted(opt.text));
      }
    } else if (key == "tls_hostname") {
      if (opt.text.empty() || opt.text.size() > 253) {
        return OptionError(key, "must be a host name of 1 to 253 characters");
      }
      for (char c : opt.text) {
        if (!IsHostNameChar(c)) {
          return OptionError(key, "must be a host name ([A-Za-z0-9._-]), not " + Quoted(opt.text));
        }
      }
      r.tls_hostname = opt.text;
    } else {
      const std::optional<int64_t> v = ParseInteger(opt);
      if (!v) return OptionError(key, "must be an integer, not " + Quoted(opt.text));
      const int64_t max = key == "ack_timeout_ms" ? kNatsMaxAckTimeoutMs : kNatsMaxConnectTimeoutMs;
      if (*v < kNatsMinTimeoutMs || *v > max) {
        return OptionError(key, "must be between " + std::to_string(kNatsMinTimeoutMs) + " and " +
                                    std::to_string(max));
      }
      (key == "ack_timeout_ms" ? r.ack_timeout_ms : r.connect_timeout_ms) = *v;
    }
  }
  if (tls_option == false && tls_scheme) {
    return OptionError("tls", "is \"false\" but \"servers\" names a tls:// server");
  }
  r.tls = tls_option.value_or(false) || tls_scheme;
  if (r.password && !r.user) return OptionError("password", "needs option \"user\"");
  if (r.user && !r.password) return OptionError("user", "needs option \"password\"");
  if (r.token && r.user) {
    return OptionError("token", "cannot be combined with options \"user\" and \"password\"");
  }
  if (r.tls_hostname && !r.tls) return OptionError("tls_hostname", "applies only with TLS");
  if (r.tls && !r.tls_hostname) {
    // libnats checks the certificate's name only when told which name to
    // expect: the servers' one host, which must be a name.
    for (const NatsServer &s : r.servers) {
      if (s.host != r.servers.front().host) {
        return OptionError("tls_hostname",
                           "is needed with TLS when the servers have different hosts (every "
                           "certificate is checked for that one name)");
      }
    }
    if (IsIpLiteral(r.servers.front().host)) {
      return OptionError("tls_hostname",
                         "is needed with TLS when the server is given by IP address (the "
                         "certificate is checked for a host name)");
    }
    r.tls_hostname = r.servers.front().host;
  }
  if (out != nullptr) *out = std::move(r);
  return std::nullopt;
}

std::optional<std::string> ValidateNatsOptions(const SinkOptions &options) {
  return ParseNatsOptions(options, nullptr);
}

std::optional<std::string> CheckNatsSubject(std::string_view subject) {
  if (subject.empty()) return std::string("A NATS subject must not be empty.");
  if (subject.size() > kNatsMaxSubjectBytes) {
    return "A NATS subject is at most " + std::to_string(kNatsMaxSubjectBytes) + " bytes.";
  }
  for (char c : subject) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return std::string(
          "A NATS subject is printable ASCII without spaces (no control characters, no "
          "non-ASCII bytes).");
    }
    if (c == '*' || c == '>') {
      return std::string(
          "A route's NATS subject must be literal: no wildcards (* or >), as JetStream stores "
          "a message under a literal subject.");
    }
  }
  if (subject.front() == '.' || subject.back() == '.' ||
      subject.find("..") != std::string_view::npos) {
    return std::string("A NATS subject is tokens separated by single dots, none of them empty.");
  }
  const std::string_view first = subject.substr(0, subject.find('.'));
  if (first == "$JS" || first == "$JSC" || first == "$NRG" || first == "$SYS") {
    return std::string(
        "Subjects under $JS, $JSC, $NRG and $SYS are the server's own API, not a route's "
        "target.");
  }
  return std::nullopt;
}

std::string NatsServerUrl(const NatsServer &server) {
  const bool ipv6 = server.host.find(':') != std::string::npos;
  return "nats://" + (ipv6 ? "[" + server.host + "]" : server.host) + ":" +
         std::to_string(server.port);
}

}  // namespace outbox
