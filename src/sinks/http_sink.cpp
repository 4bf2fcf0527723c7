// The HTTP webhook sink: a call from start to end (http_sink_class.hpp).
#include "sinks/http_sink.hpp"

#include <curl/curl.h>

#include <chrono>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sinks/http_sink_class.hpp"
#include "sinks/sigpipe_guard.hpp"

namespace outbox {

namespace {

// curl_global_init is not to be raced; sinks are built on the publisher's
// main thread only.
bool GlobalInit() {
  static const bool ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  return ok;
}

// Failures no event causes: nothing could be asked of the endpoint.
bool Unreachable(CURLcode code) {
  return code == CURLE_COULDNT_RESOLVE_HOST || code == CURLE_COULDNT_CONNECT ||
         code == CURLE_SSL_CONNECT_ERROR || code == CURLE_PEER_FAILED_VERIFICATION ||
         code == CURLE_SSL_CACERT_BADFILE || code == CURLE_UNSUPPORTED_PROTOCOL ||
         code == CURLE_TOO_MANY_REDIRECTS;
}

}  // namespace

HttpSink::HttpSink(const std::string &name, HttpOptions options)
    : name_(name), options_(std::move(options)) {
  if (!GlobalInit()) return;
  multi_ = curl_multi_init();
  if (multi_ == nullptr) return;
  curl_multi_setopt(multi_, CURLMOPT_PIPELINING, static_cast<long>(CURLPIPE_MULTIPLEX));
  curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS,
                    static_cast<long>(options_.max_connections));
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(options_.max_connections));
}

HttpSink::~HttpSink() {
  for (Slot &slot : slots_) Release(&slot.request);
  if (multi_ != nullptr) curl_multi_cleanup(multi_);
}

void HttpSink::Release(Request *request) noexcept {
  if (request->easy != nullptr) {
    if (multi_ != nullptr) curl_multi_remove_handle(multi_, request->easy);
    curl_easy_cleanup(request->easy);
    request->easy = nullptr;
  }
  if (request->headers != nullptr) {
    curl_slist_free_all(request->headers);
    request->headers = nullptr;
  }
}

void HttpSink::AddLog(LogLevel level, std::string text) noexcept {
  logs_.Add(level, std::move(text));
}

std::vector<LogLine> HttpSink::TakeLogs() { return logs_.Take(); }

std::string HttpSink::State() const { return state_; }

void HttpSink::Settle(size_t i, DeliveryStatus status, std::string error) {
  Slot &slot = slots_[i];
  if (slot.settled) return;
  slot.settled = true;
  ++settled_count_;
  out_[i].status = status;
  out_[i].error = std::move(error);
  if (status == DeliveryStatus::kDelivered) {
    if (slot.next != kNone) ready_.push_back(slot.next);
    return;
  }
  // Its key's later messages in this call would overtake it.
  for (size_t k = slot.next; k != kNone; k = slots_[k].next) {
    if (slots_[k].settled) continue;
    slots_[k].settled = true;
    ++settled_count_;
    out_[k].status = DeliveryStatus::kNotSent;
    out_[k].error = "waiting for an earlier event with the same key";
  }
}

void HttpSink::Start(size_t i) {
  Slot &slot = slots_[i];
  std::string error;
  if (!Configure(i, &error) || curl_multi_add_handle(multi_, slot.request.easy) != CURLM_OK) {
    Release(&slot.request);
    slot.transient = true;
    Settle(i, DeliveryStatus::kRetriable, error.empty() ? "could not start the request" : error);
    return;
  }
  ++in_flight_;
}

void HttpSink::Finished(CURL *easy, CURLcode code) {
  size_t i = kNone;
  char *private_data = nullptr;
  curl_easy_getinfo(easy, CURLINFO_PRIVATE, &private_data);
  i = reinterpret_cast<uintptr_t>(private_data);
  if (i >= slots_.size() || slots_[i].request.easy != easy) return;
  Slot &slot = slots_[i];
  --in_flight_;
  long status = 0;
  if (code == CURLE_OK) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  const std::string endpoint = slot.endpoint;
  Delivery &d = out_[i];
  d.retry_after_ms = slot.request.retry_after_ms;
  if (code != CURLE_OK) {
    slot.transient = true;
    slot.unreachable = Unreachable(code);
    std::string error = slot.shown + ": " + curl_easy_strerror(code);
    Release(&slot.request);
    Settle(i, DeliveryStatus::kRetriable, std::move(error));
    return;
  }
  d.answered_at_us = UnixNowUs();
  std::string error;
  const HttpAnswer answer = ClassifyHttpStatus(status);
  if (answer != HttpAnswer::kDelivered) {
    error = slot.shown + ": HTTP " + std::to_string(status);
    if (status >= 300 && status <= 399)
      error += " (redirects are followed only with follow_redirects)";
    const std::string quoted = QuotedResponse(slot.request.response);
    if (!quoted.empty()) error += ": " + quoted;
  }
  Release(&slot.request);
  if (answer == HttpAnswer::kDelivered) {
    endpoints_.Delivered(endpoint);
    if (!logged_down_.empty() && logged_down_.erase(endpoint) != 0) {
      AddLog(LogLevel::kInfo,
             "sink \"" + name_ + "\": the endpoint of " + slot.shown + " answers again");
    }
    Settle(i, DeliveryStatus::kDelivered, std::string());
  } else if (answer == HttpAnswer::kTransient) {
    slot.transient = true;
    slot.paced = status == 429 || d.retry_after_ms > 0;
    Settle(i, DeliveryStatus::kRetriable, std::move(error));
  } else {
    Settle(i, DeliveryStatus::kRejected, std::move(error));
  }
}

// A transient failure becomes the endpoint's (kTargetDown: no attempt,
// the sink's other endpoints unaffected) or the event's (kRejected: an
// attempt), as HttpEndpoints judges it.
void HttpSink::JudgeEndpoints() {
  std::set<std::string> delivered_now;
  for (size_t i = 0; i < n_; ++i) {
    if (out_[i].status == DeliveryStatus::kDelivered) delivered_now.insert(slots_[i].endpoint);
  }
  for (size_t i = 0; i < n_; ++i) {
    if (slots_[i].transient && out_[i].status == DeliveryStatus::kRetriable) {
      endpoints_.Failed(slots_[i].endpoint, messages_[i].id);
    }
  }
  for (size_t i = 0; i < n_; ++i) {
    Slot &slot = slots_[i];
    if (!slot.transient || out_[i].status != DeliveryStatus::kRetriable) continue;
    const bool down = endpoints_.Down(slot.endpoint, delivered_now.count(slot.endpoint) != 0,
                                      slot.unreachable || slot.paced);
    out_[i].status = down ? DeliveryStatus::kTargetDown : DeliveryStatus::kRejected;
    // Said once per outage of each endpoint (bounded: at most as many
    // endpoints as HttpEndpoints remembers), not once per call.
    if (down && logged_down_.size() < HttpEndpoints::kMaxEndpoints &&
        logged_down_.insert(slot.endpoint).second) {
      AddLog(LogLevel::kWarning, "sink \"" + name_ + "\": the endpoint of " + slot.shown +
                                     " is down (" + out_[i].error +
                                     "); its events wait, the sink's other endpoints go on");
    }
  }
}

void HttpSink::Run(InterruptCheck interrupted) {
  // Chains by route and key, whatever the endpoint: a route without a
  // target sends a key's events to several targets, and their order holds
  // across them (one endpoint down holds back the route's events of that
  // key at the others).
  std::map<ChainKey, size_t> last_of_key;
  for (size_t i = 0; i < n_; ++i) {
    const OutMessage &m = messages_[i];
    Slot &slot = slots_[i];
    if (std::optional<std::string> bad = CheckHttpTarget(m.target)) {
      slot.endpoint = options_.url;
      slot.refused = "its target cannot be sent to: " + *bad;
      slot.refusal = DeliveryStatus::kTargetRefused;
    } else {
      slot.endpoint = options_.url_has_target ? ExpandHttpUrl(options_, m.target) : options_.url;
      // The URL itself never reaches an error: its path or query may hold a
      // token, and errors reach outbox.workers, which monitoring roles read.
      slot.shown = options_.url_has_target ? "POST for target \"" + std::string(m.target) + "\""
                                           : std::string("POST");
      if (!Build(m, &slot.request, &slot.refused)) {
        Release(&slot.request);
        if (slot.refused.empty()) slot.refused = "the request could not be built";
      }
    }
    bool first = true;
    if (m.has_key) {
      auto [it, fresh] = last_of_key.try_emplace(ChainOf(m), i);
      if (!fresh) {
        slots_[it->second].next = i;
        first = false;
        it->second = i;
      }
    }
    if (first) ready_.push_back(i);
  }
  // A call lasts about one request's timeout: past it no request starts,
  // and what was not sent waits for the next call without an attempt (a
  // key whose every request the endpoint answers slowly must not hold the
  // publisher's cycle for the length of its chain).
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(options_.timeout_ms + options_.connect_timeout_ms);
  for (;;) {
    const bool late = std::chrono::steady_clock::now() > deadline;
    while (!late && !ready_.empty() && in_flight_ < static_cast<size_t>(options_.max_connections)) {
      const size_t i = ready_.front();
      ready_.pop_front();
      if (slots_[i].settled) continue;
      if (!slots_[i].refused.empty()) {
        // Settled on its turn, so that its key's later events wait for it.
        Settle(i, slots_[i].refusal, slots_[i].refused);
        continue;
      }
      Start(i);
    }
    if (settled_count_ == n_ || (late && in_flight_ == 0)) break;
    if (interrupted != nullptr && interrupted()) break;
    int running = 0;
    {
      // libcurl's threaded resolver starts its threads in here.
      const LibraryThreadsStartGuard no_signals_on_its_threads;
      curl_multi_perform(multi_, &running);
    }
    int left = 0;
    while (CURLMsg *msg = curl_multi_info_read(multi_, &left)) {
      if (msg->msg == CURLMSG_DONE) Finished(msg->easy_handle, msg->data.result);
    }
    if (settled_count_ == n_) break;
    if (ready_.empty() || in_flight_ >= static_cast<size_t>(options_.max_connections)) {
      curl_multi_poll(multi_, nullptr, 0, static_cast<int>(kWaitSliceMs), nullptr);
    }
  }
  const bool timed_out = std::chrono::steady_clock::now() > deadline && in_flight_ == 0;
  for (size_t i = 0; i < n_; ++i) {
    if (slots_[i].settled) continue;
    Release(&slots_[i].request);
    slots_[i].settled = true;
    if (timed_out) {
      out_[i].status = DeliveryStatus::kNotSent;
      out_[i].error = "not sent yet: the endpoint answers slowly (next cycle)";
    } else {
      out_[i].status = DeliveryStatus::kRetriable;
      out_[i].error = "interrupted";
    }
  }
  JudgeEndpoints();
}

void HttpSink::Publish(const OutMessage *messages, size_t n, Delivery *out,
                       InterruptCheck interrupted) {
  for (size_t i = 0; i < n; ++i) out[i] = Delivery{DeliveryStatus::kRetriable, "not sent"};
  if (multi_ == nullptr) {
    for (size_t i = 0; i < n; ++i) out[i].error = "libcurl could not be initialised";
    return;
  }
  SigpipeGuard guard;
  try {
    messages_ = messages;
    out_ = out;
    n_ = n;
    settled_count_ = 0;
    in_flight_ = 0;
    slots_.clear();
    slots_.resize(n);
    ready_.clear();
    Run(interrupted);
  } catch (...) {
    std::string reason;
    DescribeCurrentException(&reason);
    for (size_t i = 0; i < n; ++i) {
      if (i < slots_.size()) Release(&slots_[i].request);
      if (out[i].status == DeliveryStatus::kRetriable) out[i].error = reason;
    }
  }
  bool delivered = false, failed = false;
  for (size_t i = 0; i < n; ++i) {
    delivered = delivered || out[i].status == DeliveryStatus::kDelivered;
    failed = failed || out[i].status == DeliveryStatus::kTargetDown;
  }
  // "down" only when no endpoint took anything lately: one endpoint down
  // while others take events is that endpoint's trouble, not the sink's.
  const int64_t now_us = UnixNowUs();
  if (delivered) {
    if (state_ == "down") AddLog(LogLevel::kInfo, "sink \"" + name_ + "\": endpoints answer again");
    state_ = "connected";
    last_delivered_us_ = now_us;
  } else if (failed && now_us - last_delivered_us_ > kDownAfterUs) {
    state_ = "down";
  }
  for (Slot &slot : slots_) Release(&slot.request);
  slots_.clear();
  ready_.clear();
  messages_ = nullptr;
  out_ = nullptr;
  n_ = 0;
}

std::unique_ptr<Sink> MakeHttpSink(const std::string &name, const SinkOptions &options,
                                   std::string *error) {
  try {
    HttpOptions parsed;
    if (std::optional<std::string> bad = ParseHttpOptions(options, &parsed)) {
      *error = std::move(*bad);
      return nullptr;
    }
    auto sink = std::make_unique<HttpSink>(name, std::move(parsed));
    if (!sink->Ready()) {
      *error = "libcurl could not be initialised";
      return nullptr;
    }
    return sink;
  } catch (...) {
    DescribeCurrentException(error);
    return nullptr;
  }
}

}  // namespace outbox
