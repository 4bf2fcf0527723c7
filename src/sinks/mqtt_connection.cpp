// The MQTT sink's connections: the libmosquitto clients and their options,
// starting to connect (TCP, TLS, CONNECT; the CONNACKs are awaited by
// mqtt_delivery.cpp, within connect_timeout_ms), driving their sockets from
// the owner's thread, libmosquitto's callbacks, and closing them. Runs on
// the owner's thread only (mqtt_sink_class.hpp).
//
// A connection is never re-established in place (mosquitto_reconnect):
// after a loss every client is destroyed, with whatever libmosquitto still
// held to send, and the next call makes new ones. libmosquitto would
// otherwise send again, on reconnecting, messages that the sink already
// reported kRetriable and will send itself.
#include "sinks/mqtt_sink_class.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "sinks/mqtt_library.hpp"

namespace outbox {

namespace {

MqttSink::Link &LinkOf(void *obj) { return *static_cast<MqttSink::Link *>(obj); }

// Acknowledges at once, at the TCP level, what the broker sent: a broker
// whose socket keeps Nagle's algorithm on (mosquitto's default,
// set_tcp_nodelay false) holds each PUBACK after the first of a window until
// the previous one is acknowledged, and a client with nothing to send
// delays that acknowledgement by up to 40 ms. Linux leaves quick-ack mode
// on its own, so it is asked for again before every read. Best effort: a
// failure only costs latency.
void AckAtOnce(int fd) {
#ifdef TCP_QUICKACK
  const int on = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_QUICKACK, &on, sizeof on);
#else
  (void)fd;
#endif
}

void OnConnectCallback(mosquitto *, void *obj, int rc, int, const mosquitto_property *) {
  LinkOf(obj).sink->OnConnect(LinkOf(obj), rc);
}
void OnDisconnectCallback(mosquitto *, void *obj, int rc, const mosquitto_property *) {
  LinkOf(obj).sink->OnDisconnect(LinkOf(obj), rc);
}
void OnPublishCallback(mosquitto *, void *obj, int mid, int reason_code,
                       const mosquitto_property *) {
  LinkOf(obj).sink->OnPublish(LinkOf(obj), mid, reason_code);
}

// libmosquitto's global state (its TLS library's), made once per process,
// on the first connection; never undone (other sinks of the process may
// still use it).
bool LibraryReady() {
  static const bool ready = mosquitto_lib_init() == MOSQ_ERR_SUCCESS;
  return ready;
}

// Frees a property list libmosquitto built (mosquitto_publish_v5 copies it).
struct PropertiesGuard {
  mosquitto_property **list;
  ~PropertiesGuard() { mosquitto_property_free_all(list); }
};

}  // namespace

std::string MqttSink::Where() const {
  const bool ipv6 = options_.host.find(':') != std::string::npos;
  return std::string(options_.tls ? "mqtts://" : "mqtt://") +
         (ipv6 ? "[" + options_.host + "]" : options_.host) + ":" +
         std::to_string(options_.EffectivePort());
}

// Connection i's identifier: the suffix is the instance's random number
// plus i, so the identifiers differ and keep their length (the prefix and 17
// characters: 23 with the default prefix, what every MQTT 3.1.1 broker must
// accept).
std::string MqttSink::ClientIdOf(int index) const {
  return MqttClientId(options_.client_id, nonce_ + static_cast<uint64_t>(index));
}

int MqttSink::AskedConnections() const {
  return options_.retain ? 1 : std::clamp(options_.connections, 1, kMqttMaxConnections);
}

// Before the sink is connected, a connection refused or lost is only that
// connection's failure (StepConnecting decides once every one has an
// outcome); after, it ends them all. True when no reason is kept yet: the
// caller writes this one (the first reason is kept).
bool MqttSink::NoteLinkFailed(Link *link) noexcept {
  link->connected = false;
  connected_ = false;
  link->failed = !established_;
  if (lost_ || !lost_reason_.empty()) return false;
  lost_ = established_;
  return true;
}

void MqttSink::OnConnect(Link &link, int reason_code) noexcept {
  if (reason_code == 0) {
    link.connected = true;
    connected_ =
        std::all_of(links_.begin(), links_.end(), [](const Link &l) { return l.connected; });
    established_ = established_ || connected_;
    return;
  }
  if (!NoteLinkFailed(&link)) return;
  try {
    lost_reason_ = "the MQTT broker " + Where() + " refused the connection: " +
                   std::string(options_.protocol == 5 ? mosquitto_reason_string(reason_code)
                                                      : mosquitto_connack_string(reason_code));
  } catch (...) {
    callback_failed_ = true;
  }
}

void MqttSink::OnDisconnect(Link &link, int rc) noexcept {
  const bool was_connected = link.connected;
  if (!NoteLinkFailed(&link)) return;
  try {
    lost_reason_ = (was_connected ? "the connection to " : "cannot connect to ") + Where() +
                   (rc == MOSQ_ERR_ERRNO ? ": " + std::string(std::strerror(errno))
                                         : ": " + std::string(mosquitto_strerror(rc)));
  } catch (...) {
    callback_failed_ = true;
  }
}

void MqttSink::ForgetCaFile() noexcept {
  if (ca_file_.empty()) return;
  unlink(ca_file_.c_str());
  ca_file_.clear();
}

// Starts every connection; false (with *error) when one cannot even be
// started, and then the caller disconnects them all.
bool MqttSink::StartClients(std::string *error) {
  if (!LibraryReady()) {
    *error = "cannot connect to " + Where() + ": libmosquitto did not initialise";
    return false;
  }
  connected_ = false;
  established_ = false;
  lost_ = false;
  lost_reason_.clear();
  links_.resize(static_cast<size_t>(AskedConnections()));
  for (size_t i = 0; i < links_.size(); ++i) {
    links_[i].sink = this;
    links_[i].index = static_cast<int>(i);
  }
  for (Link &link : links_) {
    if (!StartClient(&link, error)) return false;
  }
  return true;
}

bool MqttSink::StartClient(Link *link, std::string *error) {
  const std::string prefix = "cannot connect to " + Where() + ": ";
  link->client_id = ClientIdOf(link->index);
  link->mosq = mosquitto_new(link->client_id.c_str(), true, link);
  mosquitto *const mosq = link->mosq;
  if (mosq == nullptr) {
    if (errno == ENOMEM) throw std::bad_alloc();
    *error = prefix + "libmosquitto refused the client id";
    return false;
  }
  int rc = mosquitto_int_option(mosq, MOSQ_OPT_PROTOCOL_VERSION,
                                options_.protocol == 5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311);
  // A window of PUBLISHes goes out as it is written, not held by Nagle's
  // algorithm behind the first one's acknowledgement.
  if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_int_option(mosq, MOSQ_OPT_TCP_NODELAY, 1);
  if (rc == MOSQ_ERR_SUCCESS && options_.user) {
    rc = mosquitto_username_pw_set(mosq, options_.user->c_str(),
                                   options_.password ? options_.password->c_str() : nullptr);
  }
  if (rc == MOSQ_ERR_SUCCESS && options_.tls && !SetUpTls(mosq, error)) return false;
  if (rc != MOSQ_ERR_SUCCESS) {
    if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
    *error = prefix + "libmosquitto refused an option: " + mosquitto_strerror(rc);
    return false;
  }
  mosquitto_connect_v5_callback_set(mosq, OnConnectCallback);
  mosquitto_disconnect_v5_callback_set(mosq, OnDisconnectCallback);
  mosquitto_publish_v5_callback_set(mosq, OnPublishCallback);
  rc = mosquitto_connect_async(mosq, options_.host.c_str(), options_.EffectivePort(),
                               options_.keepalive_s);
  if (rc != MOSQ_ERR_SUCCESS) {
    if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
    *error = prefix + (rc == MOSQ_ERR_ERRNO ? std::string(std::strerror(errno))
                                            : std::string(mosquitto_strerror(rc)));
    return false;
  }
  return true;
}

// TLS 1.2 or later; the server's chain and name checked unless tls_verify
// is false; trusting tls_ca's certificates, or the system's store.
bool MqttSink::SetUpTls(mosquitto *mosq, std::string *error) {
  const std::string prefix = "cannot set up TLS for " + Where() + ": ";
  int rc = MOSQ_ERR_SUCCESS;
  if (!options_.tls_ca.empty() && ca_file_.empty()) {
    // libmosquitto reads trusted certificates only from a file, when it
    // connects: the option's text goes through a private file of ours
    // (mkstemp: mode 0600, a name no one else chose), removed once the
    // connections are made or have failed (ForgetCaFile).
    const char *dir = std::getenv("TMPDIR");
    std::string ca_path =
        std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/outbox-mqtt-ca-XXXXXX";
    const int fd = mkstemp(ca_path.data());
    if (fd < 0) {
      *error = prefix + "cannot write tls_ca: " + std::strerror(errno);
      return false;
    }
    size_t written = 0;
    while (written < options_.tls_ca.size()) {
      const ssize_t w =
          write(fd, options_.tls_ca.data() + written, options_.tls_ca.size() - written);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      written += static_cast<size_t>(w);
    }
    close(fd);
    ca_file_ = ca_path;
    if (written != options_.tls_ca.size()) {
      *error = prefix + "cannot write tls_ca";
      return false;
    }
  }
  if (!options_.tls_ca.empty()) {
    rc = mosquitto_tls_set(mosq, ca_file_.c_str(), nullptr, nullptr, nullptr, nullptr);
  } else {
    rc = mosquitto_int_option(mosq, MOSQ_OPT_TLS_USE_OS_CERTS, 1);
  }
  // cert_reqs 1 (SSL_VERIFY_PEER) checks the chain, and libmosquitto the
  // host name unless "insecure"; tls_verify false turns both off.
  if (rc == MOSQ_ERR_SUCCESS) {
    rc = mosquitto_tls_opts_set(mosq, options_.tls_verify ? 1 : 0, "tlsv1.2", nullptr);
  }
  if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_tls_insecure_set(mosq, !options_.tls_verify);
  if (rc != MOSQ_ERR_SUCCESS) {
    if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
    *error = prefix + mosquitto_strerror(rc);
    return false;
  }
  return true;
}

bool MqttSink::Drive(int64_t wait_ms) {
  if (links_.empty() || lost_) return false;
  // The TLS handshake of a connection being made is driven only by
  // libmosquitto's own loop (it alone resumes it).
  if (options_.tls && !connected_) return DriveTlsHandshakes(wait_ms);
  pollfd fds[kMqttMaxConnections];
  const size_t n = links_.size();
  for (size_t i = 0; i < n; ++i) {
    fds[i] = pollfd{-1, 0, 0};  // poll() passes over a negative descriptor
    if (links_[i].failed) continue;
    const int fd = mosquitto_socket(links_[i].mosq);
    if (fd < 0) {
      OnDisconnect(links_[i], MOSQ_ERR_NO_CONN);
      if (lost_) return false;
      continue;
    }
    fds[i] = pollfd{
        fd, static_cast<short>(POLLIN | (mosquitto_want_write(links_[i].mosq) ? POLLOUT : 0)), 0};
  }
  const int ready = poll(fds, static_cast<nfds_t>(n), static_cast<int>(wait_ms));
  if (ready < 0 && errno != EINTR) {
    // This process's failure, not a connection's: every one goes.
    for (Link &link : links_) OnDisconnect(link, MOSQ_ERR_ERRNO);
    return false;
  }
  for (size_t i = 0; i < n && !lost_; ++i) {
    if (links_[i].failed || fds[i].fd < 0) continue;
    mosquitto *const mosq = links_[i].mosq;
    int rc = MOSQ_ERR_SUCCESS;
    if (ready > 0 && (fds[i].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      AckAtOnce(fds[i].fd);
      rc = mosquitto_loop_read(mosq, 1);
    }
    if (rc == MOSQ_ERR_SUCCESS && !lost_ && mosquitto_want_write(mosq)) {
      rc = mosquitto_loop_write(mosq, 1);
    }
    if (rc == MOSQ_ERR_SUCCESS && !lost_) rc = mosquitto_loop_misc(mosq);
    if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
    if (rc != MOSQ_ERR_SUCCESS && !lost_) OnDisconnect(links_[i], rc);
  }
  return !lost_;
}

// While TLS connections are being made: libmosquitto's loop, which waits
// with select() (so each socket must fit an fd_set), for each connection in
// turn; the wait goes to the first one not yet connected.
bool MqttSink::DriveTlsHandshakes(int64_t wait_ms) {
  for (Link &link : links_) {
    if (lost_) break;
    if (link.failed) continue;
    const int fd = mosquitto_socket(link.mosq);
    if (fd < 0 || fd >= FD_SETSIZE) {
      OnDisconnect(link, fd < 0 ? MOSQ_ERR_NO_CONN : MOSQ_ERR_INVAL);
      continue;
    }
    const int rc = mosquitto_loop(link.mosq, link.connected ? 0 : static_cast<int>(wait_ms), 1);
    if (!link.connected) wait_ms = 0;
    if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
    if (rc != MOSQ_ERR_SUCCESS && !lost_) OnDisconnect(link, rc);
  }
  return !lost_;
}

int MqttSink::Publish5(mosquitto *mosq, const std::string &topic, const MqttMessage &msg,
                       std::string_view id, int *mid) {
  mosquitto_property *props = nullptr;
  const PropertiesGuard guard{&props};
  if (options_.protocol == 5) {
    const std::string content_type(msg.content_type);
    int rc = mosquitto_property_add_string(&props, MQTT_PROP_CONTENT_TYPE, content_type.c_str());
    if (rc == MOSQ_ERR_SUCCESS) {
      rc = mosquitto_property_add_binary(&props, MQTT_PROP_CORRELATION_DATA, id.data(),
                                         static_cast<uint16_t>(id.size()));
    }
    std::string name;
    std::string value;
    for (const Header &h : msg.properties) {
      if (rc != MOSQ_ERR_SUCCESS) break;
      name.assign(h.name);  // MQTT strings here: no NUL (mqtt_message.hpp)
      value.assign(h.value);
      rc = mosquitto_property_add_string_pair(&props, MQTT_PROP_USER_PROPERTY, name.c_str(),
                                              value.c_str());
    }
    if (rc != MOSQ_ERR_SUCCESS) return rc;
  }
  if (msg.body.size() > static_cast<size_t>(MQTT_MAX_PAYLOAD)) return MOSQ_ERR_PAYLOAD_SIZE;
  return mosquitto_publish_v5(mosq, mid, topic.c_str(), static_cast<int>(msg.body.size()),
                              msg.body.data(), options_.qos, options_.retain, props);
}

void MqttSink::Disconnect() noexcept {
  // Read before the loop: libmosquitto runs the disconnect callback inside
  // mosquitto_disconnect, which marks the sink lost.
  const bool lost = lost_;
  for (Link &link : links_) {
    if (link.mosq == nullptr) continue;
    // A clean DISCONNECT where the connection still carries one; dropping
    // the socket is enough otherwise (the session is clean either way).
    if (link.connected && !lost) mosquitto_disconnect(link.mosq);
    mosquitto_destroy(link.mosq);
  }
  links_.clear();
  next_link_ = 0;
  connected_ = false;
  established_ = false;
  lost_ = false;
  lost_reason_.clear();
  unsure_ = false;
  callback_failed_ = false;
  ForgetCaFile();
}

}  // namespace outbox
