// Small helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <utility>

#include "sinks/sink_options.hpp"

namespace outbox {
namespace test_support {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A port nobody listened on a moment ago.
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr *>(&addr), sizeof addr) == 0) {
    socklen_t size = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr *>(&addr), &size);
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

// Passes when text contains needle; on failure shows both.
inline ::testing::AssertionResult Contains(const std::string &text, const std::string &needle) {
  if (text.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << '"' << text << "\" does not contain \"" << needle << '"';
}

// A sink option with a JSON string value.
inline SinkOption Opt(std::string key, std::string value) {
  return SinkOption{std::move(key), SinkOption::Kind::kString, std::move(value)};
}

}  // namespace test_support
}  // namespace outbox
