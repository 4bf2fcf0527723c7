// A nats-server with JetStream for the NATS sink's unit tests, and a plain
// libnats client to look at what arrived. One server per test binary run,
// started on first use (SharedNatsServer) on a free loopback port with a
// store directory of its own, user/password authentication, and a small
// max_payload (kNatsTestMaxPayload) so that "too large" costs little. It is
// killed when the process exits (a static's destructor) or dies
// (PR_SET_PDEATHSIG), and its directory removed. Readiness is waited for by
// connecting and asking JetStream, never by sleeping a fixed time.
#pragma once

#include <nats/nats.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test_support.hpp"

namespace outbox {
namespace nats_test {

constexpr const char *kUser = "outbox-test";
constexpr const char *kPassword = "pw-Secret-7781";
constexpr int kNatsTestMaxPayload = 64 * 1024;

using test_support::Clock;
using test_support::FreePort;
using test_support::SecondsSince;

// A connection of the test's own, with JetStream, for setting up streams and
// reading what arrived.
class Client {
 public:
  explicit Client(int port) {
    natsOptions *opts = nullptr;
    natsOptions_Create(&opts);
    const std::string url = "nats://127.0.0.1:" + std::to_string(port);
    natsOptions_SetURL(opts, url.c_str());
    natsOptions_SetUserInfo(opts, kUser, kPassword);
    natsOptions_SetTimeout(opts, 2000);
    natsOptions_SetAllowReconnect(opts, false);
    if (natsConnection_Connect(&nc_, opts) != NATS_OK) nc_ = nullptr;
    natsOptions_Destroy(opts);
    if (nc_ != nullptr && natsConnection_JetStream(&js_, nc_, nullptr) != NATS_OK) js_ = nullptr;
  }
  ~Client() {
    if (js_ != nullptr) jsCtx_Destroy(js_);
    if (nc_ != nullptr) natsConnection_Destroy(nc_);
  }
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  bool ok() const { return nc_ != nullptr && js_ != nullptr; }
  natsConnection *nc() const { return nc_; }

  struct StreamSpec {
    std::string name;
    std::vector<std::string> subjects;
    int64_t max_msgs = -1;
    bool discard_new = false;
    int32_t max_msg_size = -1;
  };
  bool AddStream(const StreamSpec &spec) {
    if (!ok()) return false;
    jsStreamConfig cfg;
    jsStreamConfig_Init(&cfg);
    cfg.Name = spec.name.c_str();
    std::vector<const char *> subjects;
    for (const std::string &s : spec.subjects) subjects.push_back(s.c_str());
    cfg.Subjects = subjects.data();
    cfg.SubjectsLen = static_cast<int>(subjects.size());
    cfg.MaxMsgs = spec.max_msgs;
    cfg.MaxMsgSize = spec.max_msg_size;
    cfg.Discard = spec.discard_new ? js_DiscardNew : js_DiscardOld;
    cfg.Storage = js_FileStorage;
    jsStreamInfo *si = nullptr;
    jsErrCode err = static_cast<jsErrCode>(0);
    const natsStatus s = js_AddStream(&si, js_, &cfg, nullptr, &err);
    if (si != nullptr) jsStreamInfo_Destroy(si);
    return s == NATS_OK;
  }
  bool PurgeStream(const std::string &name) {
    jsErrCode err = static_cast<jsErrCode>(0);
    return ok() && js_PurgeStream(js_, name.c_str(), nullptr, &err) == NATS_OK;
  }
  // How many messages the stream holds; -1 when it cannot be asked.
  int64_t StreamMessages(const std::string &name) {
    if (!ok()) return -1;
    jsStreamInfo *si = nullptr;
    jsErrCode err = static_cast<jsErrCode>(0);
    if (js_GetStreamInfo(&si, js_, name.c_str(), nullptr, &err) != NATS_OK) return -1;
    const int64_t msgs = static_cast<int64_t>(si->State.Msgs);
    jsStreamInfo_Destroy(si);
    return msgs;
  }

  struct Stored {
    std::string subject;
    std::string data;
    std::map<std::string, std::string> headers;  // the first value of each name
    int header_count = 0;                        // values of every name
  };
  // Every message the stream holds, in stream order.
  std::vector<Stored> Read(const std::string &name) {
    std::vector<Stored> out;
    if (!ok()) return out;
    jsStreamInfo *si = nullptr;
    jsErrCode err = static_cast<jsErrCode>(0);
    if (js_GetStreamInfo(&si, js_, name.c_str(), nullptr, &err) != NATS_OK) return out;
    const uint64_t first = si->State.FirstSeq;
    const uint64_t last = si->State.LastSeq;
    const uint64_t msgs = si->State.Msgs;
    jsStreamInfo_Destroy(si);
    if (msgs == 0) return out;
    for (uint64_t seq = first; seq <= last; ++seq) {
      natsMsg *msg = nullptr;
      if (js_GetMsg(&msg, js_, name.c_str(), seq, nullptr, &err) != NATS_OK) continue;
      Stored stored;
      stored.subject = natsMsg_GetSubject(msg);
      stored.data.assign(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
      const char **keys = nullptr;
      int count = 0;
      if (natsMsgHeader_Keys(msg, &keys, &count) == NATS_OK) {
        for (int k = 0; k < count; ++k) {
          const char **values = nullptr;
          int n = 0;
          if (natsMsgHeader_Values(msg, keys[k], &values, &n) == NATS_OK) {
            if (n > 0) stored.headers[keys[k]] = values[0];
            stored.header_count += n;
            free(static_cast<void *>(values));
          }
        }
        free(static_cast<void *>(keys));
      }
      natsMsg_Destroy(msg);
      out.push_back(std::move(stored));
    }
    return out;
  }

 private:
  natsConnection *nc_ = nullptr;
  jsCtx *js_ = nullptr;
};

// Counts the messages published to subjects (a core subscription), whether
// a stream stores them or refuses them: what was sent at all.
class Watcher {
 public:
  Watcher(natsConnection *nc, const std::string &subject) {
    if (natsConnection_SubscribeSync(&sub_, nc, subject.c_str()) != NATS_OK) sub_ = nullptr;
    if (sub_ != nullptr) natsConnection_FlushTimeout(nc, 5000);  // the server has the SUB
    nc_ = nc;
  }
  ~Watcher() {
    if (sub_ != nullptr) natsSubscription_Destroy(sub_);
  }
  Watcher(const Watcher &) = delete;
  Watcher &operator=(const Watcher &) = delete;

  // The bodies of the messages seen so far. A round trip first: the server
  // has then handed over everything routed to this connection before.
  std::vector<std::string> Seen() {
    natsConnection_FlushTimeout(nc_, 5000);
    natsMsg *msg = nullptr;
    while (sub_ != nullptr && natsSubscription_NextMsg(&msg, sub_, 50) == NATS_OK) {
      seen_.emplace_back(natsMsg_GetData(msg), static_cast<size_t>(natsMsg_GetDataLength(msg)));
      natsMsg_Destroy(msg);
    }
    return seen_;
  }

 private:
  natsConnection *nc_ = nullptr;
  natsSubscription *sub_ = nullptr;
  std::vector<std::string> seen_;
};

class Server {
 public:
  Server() {
    char dir[] = "/tmp/nats_sink_test.XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = FreePort();
      if (!Start()) Kill();  // the port was taken meanwhile: another one
    }
  }
  ~Server() {
    Kill();
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  Server(const Server &) = delete;
  Server &operator=(const Server &) = delete;

  int port() const { return port_; }
  bool running() const { return pid_ > 0; }
  bool jetstream() const { return jetstream_; }

  // Starts the server on port() with the same store; true once it answers
  // (and, with JetStream, once JetStream does).
  bool Start(bool jetstream = true) {
    jetstream_ = jetstream;
    const std::string config = dir_ + "/nats.conf";
    {
      std::ofstream out(config, std::ios::trunc);
      out << "listen: 127.0.0.1:" << port_ << "\n"
          << "max_payload: " << kNatsTestMaxPayload << "\n"
          << "authorization { user: \"" << kUser << "\", password: \"" << kPassword << "\" }\n";
      if (jetstream) out << "jetstream { store_dir: \"" << dir_ << "/store\" }\n";
    }
    const std::string log = dir_ + "/nats.log";
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      execlp("nats-server", "nats-server", "-c", config.c_str(), static_cast<char *>(nullptr));
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
  bool Restart(bool jetstream = true) {
    Kill();
    return Start(jetstream);
  }
  // SIGSTOP, returning once every thread of the server has stopped (a
  // thread running on another CPU goes on for a moment after kill()).
  bool Pause() {
    kill(pid_, SIGSTOP);
    const Clock::time_point start = Clock::now();
    while (SecondsSince(start) < 10) {
      bool all_stopped = true;
      std::error_code error;
      const std::string tasks = "/proc/" + std::to_string(pid_) + "/task";
      for (const auto &task : std::filesystem::directory_iterator(tasks, error)) {
        std::ifstream stat(task.path() / "stat");
        std::string line;
        std::getline(stat, line);
        const size_t close = line.rfind(')');
        const char state =
            close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
        if (state != 'T' && state != 't') all_stopped = false;
      }
      if (all_stopped && !error) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return false;
  }
  void Resume() { kill(pid_, SIGCONT); }

 private:
  bool WaitReady() {
    const Clock::time_point start = Clock::now();
    while (SecondsSince(start) < 20) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = 0;
        return false;
      }
      Client client(port_);
      if (client.nc() != nullptr) {
        if (!jetstream_) return true;
        natsMsg *reply = nullptr;
        if (natsConnection_RequestString(&reply, client.nc(), "$JS.API.INFO", "", 1000) ==
            NATS_OK) {
          const std::string body(natsMsg_GetData(reply),
                                 static_cast<size_t>(natsMsg_GetDataLength(reply)));
          natsMsg_Destroy(reply);
          if (body.find("\"error\"") == std::string::npos) return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::string dir_;
  int port_ = 0;
  pid_t pid_ = 0;
  bool jetstream_ = true;
};

// The test binary's one server, started on first use.
inline Server &SharedServer() {
  static Server server;
  return server;
}

}  // namespace nats_test
}  // namespace outbox
