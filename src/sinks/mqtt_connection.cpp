// The MQTT sink's connection: the libmosquitto client and its options,
// starting to connect (TCP, TLS, CONNECT; the CONNACK is awaited by
// mqtt_delivery.cpp, within connect_timeout_ms), driving its socket from the
// owner's thread, libmosquitto's callbacks, and closing it. Runs on the owner's thread only
// (mqtt_sink_class.hpp).
//
// A connection is never re-established in place (mosquitto_reconnect):
// after a loss the client is destroyed, with whatever libmosquitto still
// held to send, and the next call makes a new one. libmosquitto would
// otherwise send again, on reconnecting, messages that the sink already
// reported kRetriable and will send itself.
#include "sinks/mqtt_sink_class.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "sinks/mqtt_library.hpp"

namespace outbox {

namespace {

MqttSink *SinkOf(void *obj) { return static_cast<MqttSink *>(obj); }

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
  SinkOf(obj)->OnConnect(rc);
}
void OnDisconnectCallback(mosquitto *, void *obj, int rc, const mosquitto_property *) {
  SinkOf(obj)->OnDisconnect(rc);
}
void OnPublishCallback(mosquitto *, void *obj, int mid, int reason_code,
                       const mosquitto_property *) {
  SinkOf(obj)->OnPublish(mid, reason_code);
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

void MqttSink::OnConnect(int reason_code) noexcept {
  connack_code_ = reason_code;
  connected_ = reason_code == 0;
  if (!connected_) {
    lost_ = true;
    try {
      lost_reason_ = "the MQTT broker " + Where() + " refused the connection: " +
                     std::string(options_.protocol == 5 ? mosquitto_reason_string(reason_code)
                                                        : mosquitto_connack_string(reason_code));
    } catch (...) {
      callback_failed_ = true;
    }
  }
}

void MqttSink::OnDisconnect(int rc) noexcept {
  const bool was_connected = connected_;
  connected_ = false;
  if (lost_) return;  // the first reason stays
  lost_ = true;
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

bool MqttSink::StartClient(std::string *error) {
  const std::string prefix = "cannot connect to " + Where() + ": ";
  if (!LibraryReady()) {
    *error = prefix + "libmosquitto did not initialise";
    return false;
  }
  connected_ = false;
  lost_ = false;
  lost_reason_.clear();
  connack_code_ = -1;
  mosq_ = mosquitto_new(client_id_.c_str(), true, this);
  if (mosq_ == nullptr) {
    if (errno == ENOMEM) throw std::bad_alloc();
    *error = prefix + "libmosquitto refused the client id";
    return false;
  }
  int rc = mosquitto_int_option(mosq_, MOSQ_OPT_PROTOCOL_VERSION,
                                options_.protocol == 5 ? MQTT_PROTOCOL_V5 : MQTT_PROTOCOL_V311);
  // A window of PUBLISHes goes out as it is written, not held by Nagle's
  // algorithm behind the first one's acknowledgement.
  if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_int_option(mosq_, MOSQ_OPT_TCP_NODELAY, 1);
  if (rc == MOSQ_ERR_SUCCESS && options_.user) {
    rc = mosquitto_username_pw_set(mosq_, options_.user->c_str(),
                                   options_.password ? options_.password->c_str() : nullptr);
  }
  if (rc == MOSQ_ERR_SUCCESS && options_.tls && !SetUpTls(error)) return false;
  if (rc != MOSQ_ERR_SUCCESS) {
    if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
    *error = prefix + "libmosquitto refused an option: " + mosquitto_strerror(rc);
    return false;
  }
  mosquitto_connect_v5_callback_set(mosq_, OnConnectCallback);
  mosquitto_disconnect_v5_callback_set(mosq_, OnDisconnectCallback);
  mosquitto_publish_v5_callback_set(mosq_, OnPublishCallback);
  rc = mosquitto_connect_async(mosq_, options_.host.c_str(), options_.EffectivePort(),
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
bool MqttSink::SetUpTls(std::string *error) {
  const std::string prefix = "cannot set up TLS for " + Where() + ": ";
  std::string ca_path;
  int rc = MOSQ_ERR_SUCCESS;
  if (!options_.tls_ca.empty()) {
    // libmosquitto reads trusted certificates only from a file, when it
    // connects: the option's text goes through a private file of ours
    // (mkstemp: mode 0600, a name no one else chose), removed once the
    // connection is made or has failed (ForgetCaFile).
    const char *dir = std::getenv("TMPDIR");
    ca_path = std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/outbox-mqtt-ca-XXXXXX";
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
    rc = mosquitto_tls_set(mosq_, ca_path.c_str(), nullptr, nullptr, nullptr, nullptr);
  } else {
    rc = mosquitto_int_option(mosq_, MOSQ_OPT_TLS_USE_OS_CERTS, 1);
  }
  // cert_reqs 1 (SSL_VERIFY_PEER) checks the chain, and libmosquitto the
  // host name unless "insecure"; tls_verify false turns both off.
  if (rc == MOSQ_ERR_SUCCESS) {
    rc = mosquitto_tls_opts_set(mosq_, options_.tls_verify ? 1 : 0, "tlsv1.2", nullptr);
  }
  if (rc == MOSQ_ERR_SUCCESS) rc = mosquitto_tls_insecure_set(mosq_, !options_.tls_verify);
  if (rc != MOSQ_ERR_SUCCESS) {
    if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
    *error = prefix + mosquitto_strerror(rc);
    return false;
  }
  return true;
}

bool MqttSink::Drive(int64_t wait_ms) {
  if (mosq_ == nullptr || lost_) return false;
  const int fd = mosquitto_socket(mosq_);
  if (fd < 0) {
    if (!lost_) OnDisconnect(MOSQ_ERR_NO_CONN);
    return false;
  }
  int rc = MOSQ_ERR_SUCCESS;
  if (options_.tls && !connected_) {
    // The TLS handshake of a connection being made is driven only by
    // libmosquitto's own loop (it alone resumes it); the loop waits with
    // select(), so the socket must fit an fd_set.
    if (fd >= FD_SETSIZE) {
      OnDisconnect(MOSQ_ERR_INVAL);
      return false;
    }
    rc = mosquitto_loop(mosq_, static_cast<int>(wait_ms), 1);
  } else {
    pollfd p{fd, static_cast<short>(POLLIN | (mosquitto_want_write(mosq_) ? POLLOUT : 0)), 0};
    const int ready = poll(&p, 1, static_cast<int>(wait_ms));
    if (ready < 0 && errno != EINTR) {
      OnDisconnect(MOSQ_ERR_ERRNO);
      return false;
    }
    if (ready > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
      AckAtOnce(fd);
      rc = mosquitto_loop_read(mosq_, 1);
    }
    if (rc == MOSQ_ERR_SUCCESS && !lost_ && mosquitto_want_write(mosq_)) {
      rc = mosquitto_loop_write(mosq_, 1);
    }
    if (rc == MOSQ_ERR_SUCCESS && !lost_) rc = mosquitto_loop_misc(mosq_);
  }
  if (rc == MOSQ_ERR_NOMEM) throw std::bad_alloc();
  if (rc != MOSQ_ERR_SUCCESS && !lost_) OnDisconnect(rc);
  return !lost_;
}

int MqttSink::Publish5(const std::string &topic, const MqttMessage &msg, std::string_view id,
                       int *mid) {
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
  return mosquitto_publish_v5(mosq_, mid, topic.c_str(), static_cast<int>(msg.body.size()),
                              msg.body.data(), options_.qos, options_.retain, props);
}

void MqttSink::Disconnect() noexcept {
  if (mosq_ != nullptr) {
    // A clean DISCONNECT when the connection still carries one; dropping
    // the socket is enough otherwise (the session is clean either way).
    if (connected_ && !lost_) mosquitto_disconnect(mosq_);
    mosquitto_destroy(mosq_);
  }
  mosq_ = nullptr;
  connected_ = false;
  lost_ = false;
  unsure_ = false;
  callback_failed_ = false;
  ForgetCaFile();
}

}  // namespace outbox
