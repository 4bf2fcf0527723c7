// Helpers for the tests of the dispatcher and its parts: event ids,
// outcomes gtest prints by name, dispatching a batch at once, and the parts
// (sink registry, verdicts, late answers) wired as the Dispatcher wires them,
// on fake sinks, with batches whose rows they can point into.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/dispatch.hpp"
#include "fake_sink.hpp"

namespace outbox {
namespace test_support {

// Canonical UUIDv7 text for the n-th emitted event: byte order is emit order.
inline std::string Id(int n) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "01900000-0000-7000-8000-%012d", n);
  return buf;
}

// Outcome's name, in its order (dispatch_rows.hpp).
inline const char *Name(Outcome o) {
  static const char *const kNames[] = {"kPublished", "kRetry",       "kDead",
                                       "kPark",      "kParkNoRoute", "kUntouched"};
  const auto i = static_cast<size_t>(o);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "?";
}

// Lets gtest print outcomes by name.
inline ::testing::AssertionResult Is(const RowOutcome &out, Outcome expected) {
  if (out.outcome == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "outcome is " << Name(out.outcome) << ", expected "
                                       << Name(expected) << " (error \"" << out.error << "\")";
}

// Decide and deliver a claimed batch at once: Begin, then Finish. False when
// either failed (no row has an outcome).
inline bool BeginAndFinish(Dispatcher *dispatcher, const EventRow *rows, size_t n,
                           const DispatchSettings &settings, RowOutcome *out,
                           Sink::InterruptCheck interrupted) {
  const Dispatcher::Ticket ticket = dispatcher->Begin(rows, n, settings, out, interrupted);
  return ticket != 0 && dispatcher->Finish(ticket, interrupted);
}

constexpr int64_t kPartsNow = 1'700'000'000'000'000;  // microseconds

// Settings of the parts' tests: 3 attempts, backoff from 100 ms to 1 s.
inline DispatchSettings PartsSettings(int64_t now_us = kPartsNow) {
  DispatchSettings settings;
  settings.max_attempts = 3;
  settings.backoff_min_ms = 100;
  settings.backoff_max_ms = 1000;
  settings.now_us = now_us;
  return settings;
}

// Claimed events as the caller hands them in: their text stays where it is
// (a deque never moves its elements), rows[i] views it, out[i] is its
// outcome.
struct PartsBatch {
  std::deque<std::string> text;
  std::vector<EventRow> rows;
  std::vector<RowOutcome> out;
  std::vector<int> route_of;

  // Event n of `topic` (route 0 unless told), keyed when `key` is given.
  void Add(int n, const std::string &topic, std::optional<std::string> key = std::nullopt,
           int attempts = 0, int route = 0) {
    EventRow row;
    row.id = text.emplace_back(Id(n));
    row.topic = text.emplace_back(topic);
    row.has_key = key.has_value();
    if (key) row.key = text.emplace_back(*key);
    row.payload = text.emplace_back("{\"n\":" + std::to_string(n) + "}");
    row.headers_json = "{}";
    row.attempts = attempts;
    rows.push_back(row);
    RowOutcome o;
    o.attempts = attempts;
    out.push_back(o);
    route_of.push_back(route);
  }
  // Members 0..size(), in id order.
  std::vector<size_t> All() const {
    std::vector<size_t> members;
    for (size_t i = 0; i < rows.size(); ++i) members.push_back(i);
    return members;
  }
};

// The Dispatcher's parts, wired as it wires them: one route "orders.*" to
// sink "kafka" (FakeFactory's sinks), a registry whose retired producers go
// to the late answers. Tests clear g_brokers first.
struct DispatchParts {
  std::vector<DispatchRoute> routes{DispatchRoute{"orders.*", "kafka"}};
  LogBuffer logs{"test log line(s)"};
  std::mt19937_64 rng{42};
  OrderGuard guard;
  SinkRegistry sinks{&FakeFactory, &logs,
                     [this](const std::string &name, std::unique_ptr<Sink> *producer) {
                       late.Retire(name, producer);
                     }};
  LateAnswers late{&routes, &guard, &sinks, &verdicts, &logs};
  Verdicts verdicts{&routes, &guard, &sinks, &late.keys(), &logs, &rng};

  // Define sink `name` with one option (another value: a changed sink).
  void Define(const std::string &name, const std::string &servers = "k1:9092") {
    OptionView option;
    option.key = "bootstrap.servers";
    option.kind = SinkOption::Kind::kString;
    option.text = servers;
    SinkRow row;
    row.name = name;
    row.kind = "kafka";
    row.options = &option;
    row.option_count = 1;
    sinks.Configure(&row, 1);
  }

  // Every log line since the last call, one per line.
  std::string TakeLogs() {
    std::string text;
    for (const LogLine &line : logs.Take()) text += line.text + "\n";
    return text;
  }
};

}  // namespace test_support
}  // namespace outbox
