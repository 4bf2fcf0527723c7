// Small helpers shared by the unit tests.
#pragma once

#include <gtest/gtest.h>

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
