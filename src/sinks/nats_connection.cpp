// The NATS sink's connection: libnats's options, connecting (the first
// attempt on the owner's thread, then in libnats's background), the reply
// inbox's subscription, watching the connection for a loss, and closing it.
// Runs on the owner's thread only (nats_sink_class.hpp).
//
// Reconnecting: libnats reconnects by itself, forever, every
// kReconnectWaitMs. Its reconnect buffer is off (size 0): a message
// published while the connection is down fails at once
// (NATS_INSUFFICIENT_BUFFER) instead of waiting in a buffer to be flushed
// after the reconnect. A buffered message could only ever be acknowledged by
// a real PubAck, so buffering would not have lost anything; but the call
// would have waited out its acknowledgement timeout for nothing, and the
// message would reach JetStream at some later reconnect, perhaps past its
// duplicate window. Publish also checks the connection before each batch.
// (libnats allocates the 0-byte buffer with malloc(0); were that to fail,
// libnats would close the connection instead of reconnecting, and the next
// Publish would connect afresh: slower, never wrong.)
#include "sinks/nats_sink_class.hpp"
#include "sinks/sigpipe_guard.hpp"  // LibraryThreadsStartGuard

#include <nats/nats.h>
#include <pthread.h>
#include <signal.h>

#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

namespace outbox {

namespace {

constexpr int64_t kReconnectWaitMs = 500;
// libnats's text for NATS_NO_SERVER: all it says once it gives a connection
// up, whatever the server said before.
constexpr const char *kNoServerText = "No server available for connection";
// A connection that stopped answering PINGs is given up after about
// kPingIntervalMs * kMaxPingsOut (libnats then reconnects).
constexpr int64_t kPingIntervalMs = 10000;
constexpr int kMaxPingsOut = 3;

// libnats connects in the background after a failed first attempt only when
// it has a connected callback; the sink reads the connection's state itself,
// so there is nothing to do here.
void OnConnected(natsConnection *nc, void *closure) {
  (void)nc;
  (void)closure;
}

struct OptionsDeleter {
  void operator()(natsOptions *opts) const { natsOptions_Destroy(opts); }
};

}  // namespace

// libnats's text for the last error of this thread, without the source
// location it starts with ("(pub.c:130): Payload 20160 greater than ...").
std::string NatsSink::LastErrorText() {
  const char *text = nats_GetLastError(nullptr);
  if (text == nullptr || text[0] == '\0') return "unknown error";
  std::string_view view(text);
  if (!view.empty() && view.front() == '(') {
    const size_t end = view.find("): ");
    if (end != std::string_view::npos) view.remove_prefix(end + 3);
  }
  return std::string(view);
}

bool NatsSink::EnsureConnection(std::string *error) {
  if (nc_ != nullptr && natsConnection_Status(nc_) == NATS_CONN_STATUS_CLOSED) {
    AddLog(LogLevel::kInfo, ConnectionError("the connection to " + servers_text_ + " closed") +
                                "; connecting again");
    Disconnect();
  }
  if (nc_ == nullptr) {
    const LibraryThreadsStartGuard guard;
    const std::string prefix = "cannot connect to " + servers_text_ + ": ";
    natsOptions *raw = nullptr;
    if (nats_Open(-1) != NATS_OK || natsOptions_Create(&raw) != NATS_OK) {
      *error = prefix + "libnats: " + LastErrorText();
      return false;
    }
    const std::unique_ptr<natsOptions, OptionsDeleter> opts(raw);
    std::vector<std::string> urls;
    std::vector<const char *> url_pointers;
    for (const NatsServer &server : options_.servers) urls.push_back(NatsServerUrl(server));
    for (const std::string &url : urls) url_pointers.push_back(url.c_str());
    natsStatus s =
        natsOptions_SetServers(opts.get(), url_pointers.data(), static_cast<int>(urls.size()));
    if (s == NATS_OK) s = natsOptions_SetName(opts.get(), client_name_.c_str());
    if (s == NATS_OK) s = natsOptions_SetTimeout(opts.get(), options_.connect_timeout_ms);
    if (s == NATS_OK && options_.user) {
      s = natsOptions_SetUserInfo(opts.get(), options_.user->c_str(), options_.password->c_str());
    }
    if (s == NATS_OK && options_.token)
      s = natsOptions_SetToken(opts.get(), options_.token->c_str());
    if (s == NATS_OK && options_.tls) {
      // Verification stays on (libnats's default), against the system's CA
      // store (libnats loads OpenSSL's default paths), for one host name.
      s = natsOptions_SetSecure(opts.get(), true);
      if (s == NATS_OK) {
        s = natsOptions_SetExpectedHostname(opts.get(), options_.tls_hostname->c_str());
      }
    }
    if (s == NATS_OK) s = natsOptions_SetMaxReconnect(opts.get(), -1);
    if (s == NATS_OK) s = natsOptions_SetReconnectWait(opts.get(), kReconnectWaitMs);
    if (s == NATS_OK) s = natsOptions_SetReconnectBufSize(opts.get(), 0);
    if (s == NATS_OK)
      s = natsOptions_SetRetryOnFailedConnect(opts.get(), true, OnConnected, nullptr);
    if (s == NATS_OK) s = natsOptions_SetPingInterval(opts.get(), kPingIntervalMs);
    if (s == NATS_OK) s = natsOptions_SetMaxPingsOut(opts.get(), kMaxPingsOut);
    // A server that stops reading must not hold a write (on this thread or
    // libnats's flusher) for longer than a message may wait.
    if (s == NATS_OK) s = natsOptions_SetWriteDeadline(opts.get(), options_.ack_timeout_ms);
    if (s == NATS_OK) s = natsOptions_UseGlobalMessageDelivery(opts.get(), false);
    // Each message is written as it is published: libnats's flusher would
    // wait a millisecond to gather more, and a key's next message waits for
    // the previous one's answer, so a hot key would move one message per
    // millisecond at best.
    if (s == NATS_OK) s = natsOptions_SetSendAsap(opts.get(), true);
    if (s != NATS_OK) {
      if (s == NATS_NO_MEMORY) throw std::bad_alloc();
      *error = prefix + "libnats refused an option: " + LastErrorText();
      return false;
    }
    s = natsConnection_Connect(&nc_, opts.get());
    if (s != NATS_OK && s != NATS_NOT_YET_CONNECTED) {
      nc_ = nullptr;  // libnats made none
      if (s == NATS_NO_MEMORY) throw std::bad_alloc();
      *error = Masked(prefix + LastErrorText());
      return false;
    }
    // The reply inbox: a subject of its own for this connection, one reply
    // subject per message under it.
    natsInbox *inbox = nullptr;
    if (natsInbox_Create(&inbox) != NATS_OK) throw std::bad_alloc();
    inbox_prefix_ = std::string(inbox) + ".";
    natsInbox_Destroy(inbox);
    inbox_ = NatsInbox::Create();
    const std::string wildcard = inbox_prefix_ + "*";
    s = natsConnection_Subscribe(&sub_, nc_, wildcard.c_str(), NatsInbox::OnMessage, inbox_);
    if (s != NATS_OK) {
      sub_ = nullptr;
      *error = Masked(prefix + "cannot subscribe to its reply inbox: " + LastErrorText());
      Disconnect();
      return false;
    }
    inbox_->Retain();  // the subscription's reference, released by OnComplete
    if (natsSubscription_SetOnCompleteCB(sub_, NatsInbox::OnComplete, inbox_) != NATS_OK) {
      // Already closed: its handler may still be running, so its reference
      // is never given back (the inbox outlives the sink: a few bytes, in a
      // case libnats does not make).
      *error = prefix + "its reply inbox closed at once";
      Disconnect();
      return false;
    }
    // Answers are moved out by the handler at once; no limit of libnats's
    // may drop one (a dropped answer is a message waiting in vain).
    natsSubscription_SetPendingLimits(sub_, -1, -1);
    if (stats_ == nullptr && natsStatistics_Create(&stats_) != NATS_OK) throw std::bad_alloc();
    reconnects_seen_ = 0;
    connected_logged_ = false;
  }
  if (natsConnection_Status(nc_) != NATS_CONN_STATUS_CONNECTED) {
    *error = ConnectionError("not connected to " + servers_text_);
    return false;
  }
  const uint64_t reconnects = Reconnects();
  if (!connected_logged_ || reconnects != reconnects_seen_) {
    char url[256];
    if (natsConnection_GetConnectedUrl(nc_, url, sizeof url) != NATS_OK) url[0] = '\0';
    AddLog(LogLevel::kInfo, std::string(connected_logged_ ? "reconnected" : "connected") + " to " +
                                (url[0] != '\0' ? url : servers_text_.c_str()));
    connected_logged_ = true;
    reconnects_seen_ = reconnects;
    connect_cause_.clear();
  }
  return true;
}

// True when the connection is not the one the call started with: it is not
// connected now, or it was lost and re-established meanwhile (answers to
// what was sent before may never come).
bool NatsSink::ConnectionLost(std::string *reason) {
  if (natsConnection_Status(nc_) != NATS_CONN_STATUS_CONNECTED) {
    *reason = ConnectionError("the connection to " + servers_text_ + " was lost");
    return true;
  }
  if (Reconnects() != reconnects_seen_) {
    *reason = "the connection to " + servers_text_ + " was lost and made again";
    return true;
  }
  return false;
}

uint64_t NatsSink::Reconnects() {
  uint64_t reconnects = 0;
  if (stats_ != nullptr && natsConnection_GetStats(nc_, stats_) == NATS_OK) {
    natsStatistics_GetCounts(stats_, nullptr, nullptr, nullptr, nullptr, &reconnects);
  }
  return reconnects;
}

// `what`, and what libnats last said about the connection, with any secret
// masked.
std::string NatsSink::ConnectionError(const std::string &what) {
  const char *text = nullptr;
  if (nc_ != nullptr && natsConnection_GetLastError(nc_, &text) != NATS_OK && text != nullptr &&
      text[0] != '\0') {
    const std::string said(text);
    if (said != kNoServerText) {
      connect_cause_ = said;
    } else if (!connect_cause_.empty()) {
      return Masked(what + " (" + said + "; before that: " + connect_cause_ + ")");
    }
    return Masked(what + " (" + said + ")");
  }
  return Masked(what);
}

void NatsSink::Disconnect() noexcept {
  // Closing the connection closes the inbox's subscription; libnats then
  // calls its completion callback, which lets go of the inbox.
  if (nc_ != nullptr) natsConnection_Close(nc_);
  if (sub_ != nullptr) natsSubscription_Destroy(sub_);
  if (nc_ != nullptr) natsConnection_Destroy(nc_);
  if (inbox_ != nullptr) inbox_->Release();
  sub_ = nullptr;
  nc_ = nullptr;
  inbox_ = nullptr;
  connected_logged_ = false;
  reconnects_seen_ = 0;
}

}  // namespace outbox
