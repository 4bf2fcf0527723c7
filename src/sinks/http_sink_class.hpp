// The HTTP sink's class: one libcurl multi handle and its kept-alive
// connections, used only from the owner's thread. Private to the HTTP
// sink's files: http_sink.cpp runs a call from start to end and judges its
// outcomes, http_requests.cpp builds each request (URL, headers, body,
// signature). Everything else sees only http_sink.hpp.
//
// Threads: libcurl runs none that call our code. Its threaded resolver may
// resolve names on a thread of its own, which calls nothing of ours; every
// callback (the response's body and headers) runs inside curl_multi_perform
// on the owner's thread. CURLOPT_NOSIGNAL keeps libcurl off signals.
//
// Order: per (endpoint, key), one request in flight at a time within a
// call; the next one goes only after a 2xx, and when one fails the rest of
// its key in the call are kNotSent. Keys and endpoints go in parallel, up
// to max_connections requests at once (HTTP/2 multiplexes them over one
// connection where the server offers it).
#pragma once

#include <curl/curl.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>
#include <string>
#include <vector>

#include "core/log_buffer.hpp"
#include "core/sink.hpp"
#include "sinks/http_options.hpp"
#include "sinks/http_outcomes.hpp"

namespace outbox {

class HttpSink final : public Sink {
 public:
  HttpSink(const std::string &name, HttpOptions options);
  ~HttpSink() override;
  HttpSink(const HttpSink &) = delete;
  HttpSink &operator=(const HttpSink &) = delete;

  bool Ready() const { return multi_ != nullptr; }
  void Publish(const OutMessage *messages, size_t n, Delivery *out,
               InterruptCheck interrupted) override;
  void Poll() override {}
  std::vector<LogLine> TakeLogs() override;
  bool NeedsRecreate() const override { return false; }
  std::string State() const override;

  // What the response callbacks fill (public for their C linkage).
  struct Request {
    CURL *easy = nullptr;
    curl_slist *headers = nullptr;
    std::string url;
    std::string body;
    std::string response;        // the first kHttpMaxQuotedResponse bytes
    int64_t retry_after_ms = 0;  // from a Retry-After header
    int64_t now_unix_s = 0;
  };

 private:
  static constexpr int64_t kWaitSliceMs = 100;
  // How long without any 2xx before endpoints failing make the sink "down".
  static constexpr int64_t kDownAfterUs = 10 * 1000 * 1000;
  static constexpr size_t kNone = static_cast<size_t>(-1);

  struct Slot {
    size_t next = kNone;   // the next message of its route and key, in this call
    std::string endpoint;  // the URL after {target}
    std::string shown;     // how errors name the request (never the URL)
    Request request;
    bool settled = false;
    bool transient = false;    // failed so that the endpoint may be at fault
    bool unreachable = false;  // no answer at all could be had
    bool paced = false;        // answered 429 or with Retry-After: asked to wait
    DeliveryStatus refusal = DeliveryStatus::kRejected;
    std::string refused;  // why it cannot be sent at all (settled on its turn)
  };

  // http_sink.cpp
  void Run(InterruptCheck interrupted);
  void Start(size_t i);
  void Finished(CURL *easy, CURLcode code);
  void Settle(size_t i, DeliveryStatus status, std::string error);
  void JudgeEndpoints();
  void Release(Request *request) noexcept;
  void AddLog(LogLevel level, std::string text) noexcept;

  // http_requests.cpp: Build lays out a message's request (false: the event
  // cannot travel as HTTP, *error says why); Configure makes slot i's easy
  // handle for it.
  bool Build(const OutMessage &m, Request *request, std::string *error);
  bool Configure(size_t i, std::string *error);

  const std::string name_;
  const HttpOptions options_;
  CURLM *multi_ = nullptr;
  HttpEndpoints endpoints_;
  std::string state_ = "idle";
  int64_t last_delivered_us_ = 0;
  std::set<std::string> logged_down_;  // endpoints whose outage the log told
  LogBuffer logs_{"HTTP sink log line(s)"};

  // The current call, cleared at its end: its messages and outcomes, a
  // slot per message, the messages whose turn it is, and counts.
  std::vector<Slot> slots_;
  std::deque<size_t> ready_;
  const OutMessage *messages_ = nullptr;
  Delivery *out_ = nullptr;
  size_t n_ = 0, settled_count_ = 0, in_flight_ = 0;

  // Reused buffers.
  std::vector<Header> headers_;
  std::string header_scratch_;
  std::string body_scratch_;
};

}  // namespace outbox
