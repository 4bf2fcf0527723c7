// A mosquitto broker for the MQTT sink's unit tests (with a TLS listener
// too when asked, its certificates made by openssl's command line), and a subscriber of the
// test's own (libmosquitto, MQTT 5, QoS 1) to look at what arrived. One
// broker per test binary run, started on first use (SharedBroker) on a free
// loopback port with a directory and configuration of its own: anonymous
// clients may publish under "t/" and only read "denied/" (an ACL file, so a
// publish there is refused with reason code 0x87), and packets are at most
// kMqttTestMaxPacket bytes (advertised to MQTT 5 clients). It is killed when
// the process exits (a static's destructor) or dies (PR_SET_PDEATHSIG), and
// its directory removed. Readiness is waited for by connecting, never by
// sleeping a fixed time.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "sinks/mqtt_library.hpp"
#include "test_certificates.hpp"
#include "test_support.hpp"

namespace outbox {
namespace mqtt_test {

constexpr int kMqttTestMaxPacket = 64 * 1024;

using test_support::Clock;
using test_support::FreePort;
using test_support::SecondsSince;

// One message as the subscriber saw it.
struct Seen {
  std::string topic;
  std::string body;
  std::string content_type;
  std::string correlation;
  std::vector<std::pair<std::string, std::string>> properties;  // user properties, in order
};

// A subscriber to "t/#" (and "denied/#") at QoS 1 on a thread of
// libmosquitto's.
class Subscriber {
 public:
  explicit Subscriber(int port) {
    mosquitto_lib_init();
    mosq_ = mosquitto_new(nullptr, true, this);
    mosquitto_int_option(mosq_, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V5);
    mosquitto_connect_v5_callback_set(mosq_, OnConnect);
    mosquitto_subscribe_v5_callback_set(mosq_, OnSubscribe);
    mosquitto_message_v5_callback_set(mosq_, OnMessage);
    if (mosquitto_connect(mosq_, "127.0.0.1", port, 30) != MOSQ_ERR_SUCCESS) return;
    mosquitto_loop_start(mosq_);
    const Clock::time_point start = Clock::now();
    while (SecondsSince(start) < 10 && !subscribed()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~Subscriber() {
    mosquitto_disconnect(mosq_);
    mosquitto_loop_stop(mosq_, true);
    mosquitto_destroy(mosq_);
  }
  Subscriber(const Subscriber &) = delete;
  Subscriber &operator=(const Subscriber &) = delete;

  bool subscribed() {
    std::lock_guard<std::mutex> lock(mutex_);
    return subscribed_;
  }
  // What arrived so far, after waiting up to `seconds` for at least `count`.
  std::vector<Seen> Wait(size_t count, double seconds = 10) {
    const Clock::time_point start = Clock::now();
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (seen_.size() >= count || SecondsSince(start) > seconds) return seen_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

 private:
  static void OnConnect(mosquitto *mosq, void *, int rc, int, const mosquitto_property *) {
    if (rc != 0) return;
    const char *topics[] = {"t/#", "denied/#"};
    mosquitto_subscribe_multiple(mosq, nullptr, 2, const_cast<char *const *>(topics), 1, 0,
                                 nullptr);
  }
  static void OnSubscribe(mosquitto *, void *obj, int, int, const int *,
                          const mosquitto_property *) {
    auto *self = static_cast<Subscriber *>(obj);
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->subscribed_ = true;
  }
  static void OnMessage(mosquitto *, void *obj, const mosquitto_message *m,
                        const mosquitto_property *props) {
    Seen seen;
    seen.topic = m->topic;
    seen.body.assign(static_cast<const char *>(m->payload), static_cast<size_t>(m->payloadlen));
    for (const mosquitto_property *p = props; p != nullptr; p = mosquitto_property_next(p)) {
      const int id = mosquitto_property_identifier(p);
      char *name = nullptr;
      char *value = nullptr;
      void *binary = nullptr;
      uint16_t length = 0;
      if (id == MQTT_PROP_USER_PROPERTY &&
          mosquitto_property_read_string_pair(p, id, &name, &value, false) != nullptr) {
        seen.properties.emplace_back(name, value);
      } else if (id == MQTT_PROP_CONTENT_TYPE &&
                 mosquitto_property_read_string(p, id, &value, false) != nullptr) {
        seen.content_type = value;
      } else if (id == MQTT_PROP_CORRELATION_DATA &&
                 mosquitto_property_read_binary(p, id, &binary, &length, false) != nullptr) {
        seen.correlation.assign(static_cast<const char *>(binary), length);
      }
      free(name);
      free(value);
      free(binary);
    }
    auto *self = static_cast<Subscriber *>(obj);
    std::lock_guard<std::mutex> lock(self->mutex_);
    self->seen_.push_back(std::move(seen));
  }

  mosquitto *mosq_ = nullptr;
  std::mutex mutex_;
  bool subscribed_ = false;
  std::vector<Seen> seen_;
};

class Broker {
 public:
  // `extra`: lines added to the broker's configuration.
  explicit Broker(bool tls = false, std::string extra = "") : extra_(std::move(extra)) {
    char dir[] = "/tmp/mqtt_sink_test.XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    // No openssl command: no TLS listener (the TLS tests skip).
    tls_ = tls && test_support::MakeCertificates(dir_);
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = FreePort();
      tls_port_ = tls_ ? FreePort() : 0;
      if (!Start()) Kill();  // the port was taken meanwhile: another one
    }
  }
  ~Broker() {
    Kill();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  Broker(const Broker &) = delete;
  Broker &operator=(const Broker &) = delete;

  int port() const { return port_; }
  int tls_port() const { return tls_port_; }  // 0 without a TLS listener
  std::string dir() const { return dir_; }
  std::string Log() const {
    std::ifstream in(dir_ + "/mosquitto.log");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  bool running() const { return pid_ > 0; }

  bool Start() {
    const std::string config = dir_ + "/mosquitto.conf";
    const std::string acl = dir_ + "/acl";
    {
      std::ofstream out(acl, std::ios::trunc);
      out << "topic readwrite t/#\ntopic read denied/#\n";
    }
    {
      std::ofstream out(config, std::ios::trunc);
      out << "listener " << port_ << " 127.0.0.1\n"
          << "allow_anonymous true\n"
          << "acl_file " << acl << "\n"
          << "max_packet_size " << kMqttTestMaxPacket << "\n"
          << "persistence false\n"
          << "log_dest stderr\n"
          << extra_;
      if (tls_) {
        out << "listener " << tls_port_ << " 127.0.0.1\n"
            << "cafile " << dir_ << "/ca.pem\n"
            << "certfile " << dir_ << "/server.pem\n"
            << "keyfile " << dir_ << "/server.key\n";
      }
      // As root, mosquitto would become user "mosquitto", who cannot read
      // this private directory.
      if (geteuid() == 0) out << "user root\n";
    }
    const std::string log = dir_ + "/mosquitto.log";
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      execlp("mosquitto", "mosquitto", "-c", config.c_str(), static_cast<char *>(nullptr));
      _exit(127);
    }
    pid_ = pid;
    if (pid < 0) return false;
    return WaitReady();
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }
  bool Restart() {
    Kill();
    return Start();
  }
  void Pause() { kill(pid_, SIGSTOP); }  // mosquitto is one thread: stopped at once
  void Resume() { kill(pid_, SIGCONT); }

 private:
  bool WaitReady() {
    const Clock::time_point start = Clock::now();
    mosquitto_lib_init();
    while (SecondsSince(start) < 20) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = 0;
        return false;
      }
      mosquitto *probe = mosquitto_new(nullptr, true, nullptr);
      const bool up = mosquitto_connect(probe, "127.0.0.1", port_, 10) == MOSQ_ERR_SUCCESS;
      mosquitto_destroy(probe);
      if (up) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string extra_;
  std::string dir_;
  bool tls_ = false;
  int port_ = 0;
  int tls_port_ = 0;
  pid_t pid_ = 0;
};

// The test binary's one broker, started on first use.
inline Broker &SharedBroker() {
  static Broker broker;
  if (!broker.running()) broker.Start();
  return broker;
}

#define MQTT_REQUIRE_BROKER(broker) ASSERT_TRUE((broker).running()) << "mosquitto did not start"

}  // namespace mqtt_test
}  // namespace outbox
