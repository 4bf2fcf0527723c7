// A TCP proxy in front of the shared RabbitMQ node, for the AMQP sink's unit
// tests of a broker that hangs (Freeze: bytes stop moving both ways, as with
// a stopped process) or drops its connections (Cut), without touching the
// node the other tests share. And a listener that never answers, for
// handshakes that time out.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace outbox {
namespace amqp_test {

// A loopback socket listening on a free port; 0 on failure.
inline int ListenLoopback(int *port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) != 0 ||
      listen(fd, 16) != 0 || getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &size) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

// Accepts TCP connections (the kernel completes them) and never reads or
// answers: an AMQP handshake waits forever.
class SilentListener {
 public:
  SilentListener() { fd_ = ListenLoopback(&port_); }
  ~SilentListener() {
    if (fd_ >= 0) close(fd_);
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class Proxy {
 public:
  explicit Proxy(int upstream_port) : upstream_(upstream_port) {
    listen_ = ListenLoopback(&port_);
    if (listen_ < 0 || pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) return;
    thread_ = std::thread([this] { Run(); });
  }
  ~Proxy() {
    stop_ = true;
    Wake();
    if (thread_.joinable()) thread_.join();
    for (const auto &[a, b] : pairs_) {
      close(a);
      close(b);
    }
    if (listen_ >= 0) close(listen_);
    for (int fd : wake_) {
      if (fd >= 0) close(fd);
    }
  }
  Proxy(const Proxy &) = delete;
  Proxy &operator=(const Proxy &) = delete;

  int port() const { return port_; }
  int accepted() const { return accepted_.load(); }
  // Stop moving bytes (both ways) until Freeze(false).
  void Freeze(bool on) {
    frozen_ = on;
    Wake();
  }
  // Close every connection, as a broker that went away.
  void Cut() {
    cut_ = true;
    Wake();
    while (cut_.load()) std::this_thread::yield();
  }

 private:
  void Wake() {
    const char c = 0;
    if (wake_[1] >= 0) static_cast<void>(write(wake_[1], &c, 1));
  }

  int Upstream() const {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(upstream_));
    if (fd >= 0 && connect(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0) return fd;
    if (fd >= 0) close(fd);
    return -1;
  }

  // Moves what `from` holds to `to`; false when either side is done.
  static bool Pump(int from, int to) {
    char buf[65536];
    const ssize_t got = read(from, buf, sizeof buf);
    if (got <= 0) return false;
    for (ssize_t sent = 0; sent < got;) {
      const ssize_t w = write(to, buf + sent, static_cast<size_t>(got - sent));
      if (w <= 0) return false;
      sent += w;
    }
    return true;
  }

  void Run() {
    while (!stop_) {
      if (cut_) {
        for (const auto &[a, b] : pairs_) {
          close(a);
          close(b);
        }
        pairs_.clear();
        cut_ = false;
      }
      std::vector<pollfd> fds = {{listen_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
      const bool pumping = !frozen_;
      if (pumping) {
        for (const auto &[a, b] : pairs_) {
          fds.push_back({a, POLLIN, 0});
          fds.push_back({b, POLLIN, 0});
        }
      }
      if (poll(fds.data(), fds.size(), 1000) <= 0) continue;
      char drain[64];
      while (read(wake_[0], drain, sizeof drain) > 0) {
      }
      if (pumping) {
        // The pairs polled above, before any accepted below.
        std::vector<std::pair<int, int>> alive;
        for (size_t k = 0; 2 + 2 * k + 1 < fds.size(); ++k) {
          const auto [a, b] = pairs_[k];
          bool ok = true;
          if (fds[2 + 2 * k].revents != 0) ok = Pump(a, b);
          if (ok && fds[3 + 2 * k].revents != 0) ok = Pump(b, a);
          if (ok) {
            alive.emplace_back(a, b);
          } else {
            close(a);
            close(b);
          }
        }
        pairs_ = std::move(alive);
      }
      if ((fds[0].revents & POLLIN) != 0) {
        const int client = accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
        if (client >= 0) {
          const int server = Upstream();
          if (server >= 0) {
            pairs_.emplace_back(client, server);
            ++accepted_;
          } else {
            close(client);
          }
        }
      }
    }
  }

  const int upstream_;
  int listen_ = -1;
  int port_ = 0;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::vector<std::pair<int, int>> pairs_;  // (client, upstream); the proxy thread's
  std::atomic<bool> stop_{false};
  std::atomic<bool> frozen_{false};
  std::atomic<bool> cut_{false};
  std::atomic<int> accepted_{0};
};

}  // namespace amqp_test
}  // namespace outbox
