// Each message as the HTTP sink sends it: URL, headers, body and signature
// (http_sink_class.hpp), and the easy handle's settings.
#include <curl/curl.h>

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "core/message_format.hpp"
#include "sinks/http_options.hpp"
#include "sinks/http_outcomes.hpp"
#include "sinks/http_signature.hpp"
#include "sinks/http_sink_class.hpp"

namespace outbox {

namespace {

extern "C" size_t KeepResponse(char *data, size_t size, size_t count, void *user) {
  auto *request = static_cast<HttpSink::Request *>(user);
  const size_t bytes = size * count;
  std::string &kept = request->response;
  if (kept.size() < kHttpMaxQuotedResponse) {
    const size_t room = kHttpMaxQuotedResponse - kept.size();
    kept.append(data, bytes < room ? bytes : room);
  }
  return bytes;  // the rest is read and dropped
}

extern "C" size_t KeepHeader(char *data, size_t size, size_t count, void *user) {
  auto *request = static_cast<HttpSink::Request *>(user);
  const size_t bytes = size * count;
  const std::string_view line(data, bytes);
  constexpr std::string_view kName = "retry-after:";
  if (line.size() > kName.size()) {
    bool match = true;
    for (size_t i = 0; i < kName.size() && match; ++i) {
      const char c = line[i] >= 'A' && line[i] <= 'Z' ? static_cast<char>(line[i] + 32) : line[i];
      match = c == kName[i];
    }
    if (match) {
      const std::optional<int64_t> ms =
          ParseRetryAfter(line.substr(kName.size()), request->now_unix_s);
      request->retry_after_ms = ms ? *ms : 0;
    }
  }
  return bytes;
}

bool SameName(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto fold = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; };
    if (fold(a[i]) != fold(b[i])) return false;
  }
  return true;
}

// The reason an event's own header cannot travel; nothing when all can. A
// header the sink's owner set statically (credentials, say) is theirs: an
// event may not send a second one beside it.
std::optional<std::string> CheckUserHeaders(const OutMessage &m, const HttpOptions &options) {
  for (size_t i = 0; i < m.header_count; ++i) {
    const Header &h = m.headers[i];
    if (!IsHttpToken(h.name)) {
      return std::string("a header of the event has a name that is not an HTTP token");
    }
    if (IsReservedHttpHeader(h.name)) {
      return "its header \"" + std::string(h.name) +
             "\" is reserved (Host, Content-Length, Content-Type, Transfer-Encoding, "
             "Connection, webhook-*, ce-*, outbox-*, also with _ for -)";
    }
    if (IsOwnerOnlyHttpHeader(h.name)) {
      return "its header \"" + std::string(h.name) +
             "\" is one only the sink's owner may send (option headers: credentials such as "
             "Authorization and Cookie, User-Agent, Origin, Forwarded, X-Forwarded-*, "
             "X-HTTP-Method-Override and the like)";
    }
    if (!IsHttpHeaderValue(h.value)) {
      return "its header \"" + std::string(h.name) + "\" has a value with CR, LF or NUL";
    }
    for (const auto &fixed : options.headers) {
      if (SameName(fixed.first, h.name)) {
        return "its header \"" + std::string(h.name) + "\" is one the sink sets (option headers)";
      }
    }
  }
  return std::nullopt;
}

bool Append(curl_slist **list, std::string_view name, std::string_view value) {
  std::string line(name);
  // "Name;" sends an empty value; "Name:" would drop the header.
  if (value.empty()) {
    line += ";";
  } else {
    line += ": ";
    line.append(value);
  }
  curl_slist *grown = curl_slist_append(*list, line.c_str());
  if (grown == nullptr) return false;
  *list = grown;
  return true;
}

}  // namespace

bool HttpSink::Build(const OutMessage &m, Request *request, std::string *error) {
  if (std::optional<std::string> bad = CheckUserHeaders(m, options_)) {
    *error = std::move(*bad);
    return false;
  }
  const bool cloudevents = m.format == MessageFormat::kCloudEvents;
  const CloudEventsMode mode = cloudevents ? options_.cloudevents_mode : CloudEventsMode::kBinary;
  if (cloudevents && mode == CloudEventsMode::kStructured) {
    request->body = std::string(HeaderedBody(m, mode, &body_scratch_));
    headers_.clear();
  } else {
    request->body.assign(m.payload.data(), m.payload.size());
    HeaderedHeaders(m, mode, &header_scratch_, &headers_);
  }
  request->url = options_.url_has_target ? ExpandHttpUrl(options_, m.target) : options_.url;
  request->now_unix_s = static_cast<int64_t>(std::time(nullptr));
  curl_slist *list = nullptr;
  bool ok = true;
  if (!cloudevents) {
    ok = Append(&list, "Content-Type", "application/json");
  } else if (mode == CloudEventsMode::kStructured) {
    ok = Append(&list, "Content-Type", "application/cloudevents+json");
  }
  for (const Header &h : headers_) {
    if (!IsHttpToken(h.name) || !IsHttpHeaderValue(h.value)) {
      curl_slist_free_all(list);
      *error = "its header \"" + std::string(IsHttpToken(h.name) ? h.name : "?") +
               "\" cannot travel in HTTP: its value holds CR, LF or NUL";
      return false;
    }
    ok = ok && Append(&list, h.name, h.value);
  }
  if (!options_.url_has_target) {
    if (!IsHttpHeaderValue(m.target)) {
      curl_slist_free_all(list);
      *error = "its target cannot travel in header outbox-target";
      return false;
    }
    ok = ok && Append(&list, "outbox-target", m.target);
  }
  ok = ok && Append(&list, "webhook-id", m.id);
  ok = ok && Append(&list, "webhook-timestamp", std::to_string(request->now_unix_s));
  if (options_.secret) {
    const std::string signature =
        WebhookSignature(*options_.secret, m.id, request->now_unix_s, request->body);
    ok = ok && !signature.empty() && Append(&list, "webhook-signature", signature);
  }
  for (const auto &header : options_.headers) ok = ok && Append(&list, header.first, header.second);
  ok = ok && Append(&list, "Accept", "*/*");
  // "Expect:" with nothing after it removes libcurl's "Expect: 100-continue"
  // (a round trip more for bodies over 1 MB).
  if (ok) {
    curl_slist *grown = curl_slist_append(list, "Expect:");
    ok = grown != nullptr;
    if (ok) list = grown;
  }
  request->headers = list;
  if (!ok) *error = "out of memory building the request";
  return ok;
}

bool HttpSink::Configure(size_t i, std::string *error) {
  Request *request = &slots_[i].request;
  CURL *easy = curl_easy_init();
  if (easy == nullptr) {
    *error = "libcurl could not make a request (out of memory)";
    return false;
  }
  request->easy = easy;
  bool ok = true;
  auto set = [&](CURLoption option, auto value) {
    ok = ok && curl_easy_setopt(easy, option, value) == CURLE_OK;
  };
  set(CURLOPT_URL, request->url.c_str());
  set(CURLOPT_PROTOCOLS_STR, "http,https");
  set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  set(CURLOPT_FOLLOWLOCATION, options_.follow_redirects ? 1L : 0L);
  set(CURLOPT_MAXREDIRS, 5L);
  set(CURLOPT_POSTREDIR, static_cast<long>(CURL_REDIR_POST_ALL));
  set(CURLOPT_NOSIGNAL, 1L);
  set(CURLOPT_PROXY, "");  // never a proxy from the server's environment
  set(CURLOPT_NOPROXY, "*");
  set(CURLOPT_NETRC, static_cast<long>(CURL_NETRC_IGNORED));
  set(CURLOPT_POST, 1L);
  set(CURLOPT_POSTFIELDS, request->body.data());
  set(CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request->body.size()));
  set(CURLOPT_HTTPHEADER, request->headers);
  set(CURLOPT_USERAGENT, "outbox");
  set(CURLOPT_TIMEOUT_MS, static_cast<long>(options_.timeout_ms));
  set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(options_.connect_timeout_ms));
  set(CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
  set(CURLOPT_PIPEWAIT, 1L);
  set(CURLOPT_TCP_KEEPALIVE, 1L);
  set(CURLOPT_SSL_VERIFYPEER, options_.tls_verify ? 1L : 0L);
  set(CURLOPT_SSL_VERIFYHOST, options_.tls_verify ? 2L : 0L);
  if (options_.tls_ca) {
    curl_blob blob;
    blob.data = const_cast<char *>(options_.tls_ca->data());
    blob.len = options_.tls_ca->size();
    blob.flags = CURL_BLOB_COPY;
    set(CURLOPT_CAINFO_BLOB, &blob);
    set(CURLOPT_CAPATH, static_cast<const char *>(nullptr));
  }
  set(CURLOPT_WRITEFUNCTION, &KeepResponse);
  set(CURLOPT_WRITEDATA, static_cast<void *>(request));
  set(CURLOPT_HEADERFUNCTION, &KeepHeader);
  set(CURLOPT_HEADERDATA, static_cast<void *>(request));
  // Which message a finished transfer is (Finished checks it against the slot's handle).
  set(CURLOPT_PRIVATE, reinterpret_cast<char *>(static_cast<uintptr_t>(i)));
  if (!ok) *error = "libcurl refused a setting of the request";
  return ok;
}

}  // namespace outbox
