// What the publisher does with each claimed event: route it, keep per-key
// order across retries, park events while a sink is down, retry a refused
// message on its own, count attempts and let events die. Runs the Dispatcher
// against fake sinks that record what reached the "broker".
#include "core/dispatch.hpp"
#include "dispatch_support.hpp"
#include "fake_sink.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

// ------------------------------------------------------------ test data

struct Event {
  std::string id;
  std::string topic;
  std::optional<std::string> key;
  std::string payload = "{\"n\":1}";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string headers_json = "{}";
  int attempts = 0;
};

Event Ev(int n, std::string topic, std::optional<std::string> key = std::nullopt,
         int attempts = 0) {
  Event e;
  e.id = Id(n);
  e.topic = std::move(topic);
  e.key = std::move(key);
  e.payload = "{\"n\":" + std::to_string(n) + "}";
  e.attempts = attempts;
  return e;
}

struct RouteDef {
  std::string pattern;
  std::string sink;
  std::optional<std::string> target;
  bool paused = false;
};

struct SinkDef {
  std::string name;
  std::string kind = "kafka";
  SinkOptions options = {SinkOption{"bootstrap.servers", SinkOption::Kind::kString, "k1:9092"}};
};

SinkDef SinkNamed(std::string name) {
  SinkDef s;
  s.name = std::move(name);
  return s;
}

constexpr int64_t kNow = 1'700'000'000'000'000;  // microseconds
constexpr int64_t kMinMs = 100;
constexpr int64_t kMaxMs = 1000;
constexpr int64_t kMinUs = kMinMs * 1000;
constexpr int64_t kMaxUs = kMaxMs * 1000;
constexpr int kMaxAttempts = 3;

class DispatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_brokers.clear();
    g_interrupted = false;
  }
  void TearDown() override { g_interrupted = false; }

  FakeBroker &Broker(const std::string &name) { return *BrokerNamed(name); }

  void Configure(const std::vector<RouteDef> &routes, const std::vector<SinkDef> &sinks) {
    std::vector<RouteRow> route_rows;
    for (const RouteDef &r : routes) {
      RouteRow row;
      row.pattern = r.pattern;
      row.sink = r.sink;
      row.has_target = r.target.has_value();
      if (r.target) row.target = *r.target;
      row.paused = r.paused;
      route_rows.push_back(row);
    }
    std::vector<std::vector<OptionView>> option_views(sinks.size());
    std::vector<SinkRow> sink_rows;
    for (size_t i = 0; i < sinks.size(); ++i) {
      for (const SinkOption &o : sinks[i].options) {
        OptionView v;
        v.key = o.key;
        v.kind = o.kind;
        v.text = o.text;
        option_views[i].push_back(v);
      }
      SinkRow row;
      row.name = sinks[i].name;
      row.kind = sinks[i].kind;
      row.options = option_views[i].data();
      row.option_count = option_views[i].size();
      sink_rows.push_back(row);
    }
    dispatcher_.Configure(route_rows.data(), route_rows.size(), sink_rows.data(), sink_rows.size());
  }

  // One route "orders.*" to sink "kafka" (the usual setup).
  void ConfigureOneSink() {
    Configure({{"orders.*", "kafka", std::nullopt}}, {SinkNamed("kafka")});
  }

  // The views of an Event, valid while the Event and `headers` live.
  static EventRow Row(const Event &e, std::vector<Header> *headers) {
    for (const auto &h : e.headers) {
      Header v;
      v.name = h.first;
      v.value = h.second;
      headers->push_back(v);
    }
    EventRow row;
    row.id = e.id;
    row.topic = e.topic;
    row.has_key = e.key.has_value();
    if (e.key) row.key = *e.key;
    row.payload = e.payload;
    row.headers = headers->empty() ? nullptr : headers->data();
    row.header_count = headers->size();
    row.headers_json = e.headers_json;
    row.attempts = e.attempts;
    return row;
  }

  // The settings every test runs with, at now_us.
  DispatchSettings Settings(int64_t now_us) const {
    DispatchSettings settings;
    settings.max_attempts = kMaxAttempts;
    settings.backoff_min_ms = kMinMs;
    settings.backoff_max_ms = kMaxMs;
    settings.now_us = now_us;
    settings.ack_wait_ms = ack_wait_ms_;
    return settings;
  }

  std::vector<RowOutcome> Dispatch(const std::vector<Event> &events, int64_t now_us = kNow) {
    std::vector<std::vector<Header>> headers(events.size());
    std::vector<EventRow> rows;
    for (size_t i = 0; i < events.size(); ++i) rows.push_back(Row(events[i], &headers[i]));
    const DispatchSettings settings = Settings(now_us);
    std::vector<RowOutcome> out(events.size());
    BeginAndFinish(&dispatcher_, rows.data(), rows.size(), settings, out.data(), &Interrupted);
    return out;
  }

  // Events 1, 2 and 3 (keys a, b, c) on a broker that closes the connection
  // over anything, lost with others twice: each is sent alone from now on.
  std::vector<Event> ThreeSuspectsSentAlone() {
    const std::vector<Event> events = {Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"),
                                       Ev(3, "orders.a", "c")};
    LostWithOthersTwice(events);
    return events;
  }
  // One sink, pipelined, whose broker closes the connection over anything:
  // `events` are dispatched twice, each of them a key's first lost with
  // others twice (sent alone from now on), and the broker goes on so.
  // Returns a time when they are all due again.
  int64_t LostWithOthersTwice(const std::vector<Event> &events) {
    ConfigureOneSink();
    Broker("kafka").pipelined = true;
    Broker("kafka").script = [](const OutMessage &, int) { return LostWithConnection(); };
    (void)Dispatch(events);
    (void)Dispatch(events, kNow + 2 * kMaxUs);
    return kNow + 4 * kMaxUs;
  }
  // One sink, an event delivered, then `wear` applied to its broker: the
  // next event goes through a new producer, the old one destroyed (the
  // logs of the first dispatch are taken away before).
  void ExpectReplacedBeforeItsNextUse(const std::function<void(FakeBroker *)> &wear) {
    ConfigureOneSink();
    Dispatch({Ev(1, "orders.a")});
    wear(&Broker("kafka"));
    Logs();
    const auto out = Dispatch({Ev(2, "orders.a")}, kNow + 1);
    EXPECT_TRUE(Is(out[0], Outcome::kPublished));
    EXPECT_EQ(Broker("kafka").destroyed, 1);
    EXPECT_EQ(Broker("kafka").created, 2);
    EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2)}));
  }
  // ThreeSuspectsSentAlone; then a batch of event 1 (a suspect, sent alone)
  // and event 4 (a group of its own, sent first), `wear` applied to the
  // broker as event 4 is sent.
  void ExpectNotReplacedUnderItsOwnGroup(const std::function<void(FakeBroker *)> &wear) {
    const std::vector<Event> events = ThreeSuspectsSentAlone();
    FakeBroker *broker = &Broker("kafka");
    broker->script = [](const OutMessage &, int) { return Delivered(); };
    broker->on_send = [broker, wear, id = Id(4)](const SentMessage &m) {
      if (m.id == id) wear(broker);
    };
    const size_t before = broker->calls.size();
    const auto out = Dispatch({events[0], Ev(4, "orders.a", "d")}, kNow + 4 * kMaxUs);
    ASSERT_EQ(broker->calls.size(), before + 2) << "the group, then the suspect alone";
    EXPECT_EQ(broker->alone_calls.count(before + 1), 1u);
    EXPECT_EQ(broker->destroyed, 0) << "replaced while its first group awaited answers";
    EXPECT_EQ(broker->created, 1);
    EXPECT_TRUE(Is(out[1], Outcome::kPublished));
    (void)Dispatch({Ev(6, "orders.a", "e")}, kNow + 5 * kMaxUs);
    EXPECT_EQ(broker->destroyed, 1) << "replaced once idle";
    EXPECT_EQ(broker->created, 2);
    broker->on_send = nullptr;
  }
  // LostWithOthersTwice, and then the broker delivers everything.
  int64_t SuspectsOfADeliveringSink(const std::vector<Event> &events) {
    const int64_t due = LostWithOthersTwice(events);
    Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
    return due;
  }

  // Events 1 .. n, each on a key of its own, that the broker (one sink,
  // pipelined) closes its connection over: whatever is sent with one of
  // them is lost with it, and the rest is delivered.
  std::vector<Event> CulpritBurst(int n) {
    ConfigureOneSink();
    Broker("kafka").pipelined = true;
    std::set<std::string, std::less<>> culprits;
    std::vector<Event> table;
    for (int k = 1; k <= n; ++k) {
      culprits.insert(Id(k));
      table.push_back(Ev(k, "orders.a", "c" + std::to_string(k)));
    }
    auto closed_in = std::make_shared<std::set<int>>();
    Broker("kafka").script = [culprits, closed_in](const OutMessage &m, int call) {
      if (culprits.count(m.id) != 0) closed_in->insert(call);
      return closed_in->count(call) != 0 ? LostWithConnection() : Delivered();
    };
    return table;
  }

  // The publisher's loop over a table, simulated: each cycle, `step_us`
  // apart, claims the pending events due by then in (due, id) order, as the
  // claim does, and writes their outcomes back. Returns the cycle at which
  // each event was published (absent: never); *first_down: the first cycle
  // after which the sink had been judged unavailable (-1: never).
  std::map<std::string, int> Drain(const std::vector<Event> &events, int cycles, int64_t step_us,
                                   int *first_down) {
    std::vector<Event> table = events;
    std::map<std::string, int64_t> due;  // by id; absent: not pending
    std::map<std::string, int> published;
    for (const Event &e : table) due[e.id] = kNow;
    *first_down = -1;
    int64_t now = kNow;
    for (int cycle = 0; cycle < cycles && !due.empty(); ++cycle, now += step_us) {
      std::vector<std::pair<int64_t, size_t>> ready;
      for (size_t k = 0; k < table.size(); ++k) {
        auto it = due.find(table[k].id);
        if (it != due.end() && it->second <= now) ready.emplace_back(it->second, k);
      }
      std::sort(ready.begin(), ready.end(), [&](const auto &a, const auto &b) {
        return a.first != b.first ? a.first < b.first : table[a.second].id < table[b.second].id;
      });
      if (ready.empty()) continue;
      std::vector<Event> batch;
      for (const auto &[when, k] : ready) batch.push_back(table[k]);
      const auto out = Dispatch(batch, now);
      for (size_t b = 0; b < batch.size(); ++b) {
        Event &row = table[ready[b].second];
        row.attempts = out[b].attempts;
        if (Is(out[b], Outcome::kPublished)) published[row.id] = cycle;
        if (Is(out[b], Outcome::kPublished) || Is(out[b], Outcome::kDead)) {
          due.erase(row.id);
        } else {
          due[row.id] = out[b].next_attempt_us;
        }
      }
      if (*first_down < 0 && CountLogs(LogLevel::kWarning, "unavailable") > 0) *first_down = cycle;
    }
    return published;
  }

  // A batch handed to Begin and not finished yet: its rows and outcomes must
  // stay where they are until Finish.
  struct Begun {
    std::vector<Event> events;
    std::vector<std::vector<Header>> headers;
    std::vector<EventRow> rows;
    std::vector<RowOutcome> out;
    Dispatcher::Ticket ticket = 0;
  };
  std::unique_ptr<Begun> Begin(const std::vector<Event> &events, int64_t now_us = kNow) {
    auto b = std::make_unique<Begun>();
    b->events = events;
    b->headers.resize(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      b->rows.push_back(Row(b->events[i], &b->headers[i]));
    }
    b->out.resize(events.size());
    const DispatchSettings settings = Settings(now_us);
    b->ticket =
        dispatcher_.Begin(b->rows.data(), b->rows.size(), settings, b->out.data(), &Interrupted);
    return b;
  }
  bool Finish(Begun *b) { return dispatcher_.Finish(b->ticket, &Interrupted); }

  std::string SinkStates() const {
    char text[512];
    dispatcher_.SinkStates(text, sizeof text);
    return text;
  }

  void NoteWaiting(const Event &e, int64_t until_us) {
    std::vector<Header> headers;
    dispatcher_.NoteWaiting(Row(e, &headers), until_us);
  }

  // Late answers (ack wait): what SettleLate judged, all of it.
  std::vector<LateOutcome> SettleLate(int64_t now_us) {
    std::vector<LateOutcome> outcomes;
    EXPECT_TRUE(dispatcher_.SettleLate(Settings(now_us)));
    LateOutcome o;
    while (dispatcher_.NextLateOutcome(&o)) outcomes.push_back(o);
    return outcomes;
  }
  int64_t ack_wait_ms_ = 0;

  // Drains the dispatcher's log into logs_ and returns it.
  const std::vector<LogLine> &Logs() {
    LogLevel level;
    char text[1024];
    while (dispatcher_.NextLog(&level, text, sizeof text)) logs_.push_back(LogLine{level, text});
    return logs_;
  }
  int CountLogs(LogLevel level, const std::string &needle) {
    int n = 0;
    for (const LogLine &l : Logs()) {
      if (l.level == level && l.text.find(needle) != std::string::npos) ++n;
    }
    return n;
  }
  std::string AllLogs() {
    std::string s;
    for (const LogLine &l : Logs()) s += l.text + "\n";
    return s;
  }

  Dispatcher dispatcher_{&FakeFactory};
  std::vector<LogLine> logs_;
};

// Fails the ids in `failing` with `fail`, delivers the rest.
Script FailOnly(std::set<std::string> failing, Delivery fail = Retriable()) {
  return [failing, fail](const OutMessage &m, int) {
    return failing.count(std::string(m.id)) != 0 ? fail : Delivered();
  };
}

// ------------------------------------------------------------ routing

TEST_F(DispatcherTest, EventGoesToTheSinkAndTargetOfItsRoute) {
  Configure({{"orders.*", "kafka_a", std::nullopt}, {"payments", "kafka_b", "pay-topic"}},
            {SinkNamed("kafka_a"), SinkNamed("kafka_b")});
  const auto out = Dispatch({Ev(1, "orders.created"), Ev(2, "payments")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));

  ASSERT_EQ(Broker("kafka_a").calls.size(), 1u);
  ASSERT_EQ(Broker("kafka_a").calls[0].size(), 1u);
  EXPECT_EQ(Broker("kafka_a").calls[0][0].id, Id(1));
  EXPECT_EQ(Broker("kafka_a").calls[0][0].target, "orders.created");  // no target: the topic

  ASSERT_EQ(Broker("kafka_b").calls.size(), 1u);
  ASSERT_EQ(Broker("kafka_b").calls[0].size(), 1u);
  EXPECT_EQ(Broker("kafka_b").calls[0][0].id, Id(2));
  EXPECT_EQ(Broker("kafka_b").calls[0][0].topic, "payments");
  EXPECT_EQ(Broker("kafka_b").calls[0][0].target, "pay-topic");
}

TEST_F(DispatcherTest, EachMessageNamesItsRouteSoThatSinksChainKeysPerRoute) {
  // Sinks chain a call's messages by (route, key): the same key on two
  // routes of one sink is two chains, so one route's failure never holds
  // back the other's event; on one route it is one chain across topics.
  Configure({{"orders.*", "kafka", std::nullopt}, {"audit.*", "kafka", std::nullopt}},
            {SinkNamed("kafka")});
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "audit.x", "k"), Ev(3, "orders.b", "k")});
  ASSERT_EQ(Broker("kafka").calls.size(), 1u);
  const std::vector<SentMessage> &call = Broker("kafka").calls[0];
  ASSERT_EQ(call.size(), 3u);
  EXPECT_NE(call[0].route, call[1].route);
  EXPECT_EQ(call[0].route, call[2].route);
}

TEST_F(DispatcherTest, ACrossTopicOvertakeOnKafkaIsNotReportedAsASplitRequest) {
  // On Kafka a route without a target sends a key's events to two topics,
  // and one topic's failure does not hold back the other (README, Limits):
  // that is not the split-request break the warning names.
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Retriable("Local: Message timed out");
    return Delivered();
  };
  const auto out =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.b", "k"), Ev(3, "orders.x", "j")});
  ASSERT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "split over two requests"), 0) << AllLogs();
}

TEST_F(DispatcherTest, ExactRouteBeatsWildcardWhateverTheCatalogOrder) {
  for (bool exact_first : {false, true}) {
    SCOPED_TRACE(exact_first ? "exact route listed first" : "wildcard route listed first");
    Configure({}, {});  // close the sinks of the previous round
    g_brokers.clear();
    std::vector<RouteDef> routes = {{"orders.*", "wild", std::nullopt},
                                    {"orders.created", "exact", "exact-target"}};
    if (exact_first) std::swap(routes[0], routes[1]);
    Configure(routes, {SinkNamed("wild"), SinkNamed("exact")});
    const auto out = Dispatch({Ev(1, "orders.created"), Ev(2, "orders.paid")});
    EXPECT_TRUE(Is(out[0], Outcome::kPublished));
    EXPECT_TRUE(Is(out[1], Outcome::kPublished));
    EXPECT_EQ(Broker("exact").AllIds(), std::vector<std::string>{Id(1)});
    ASSERT_EQ(Broker("exact").calls.size(), 1u);
    EXPECT_EQ(Broker("exact").calls[0][0].target, "exact-target");
    EXPECT_EQ(Broker("wild").AllIds(), std::vector<std::string>{Id(2)});
  }
}

TEST_F(DispatcherTest, LongestWildcardWins) {
  Configure({{"*", "catch_all", std::nullopt}, {"orders.*", "orders", std::nullopt}},
            {SinkNamed("catch_all"), SinkNamed("orders")});
  Dispatch({Ev(1, "orders.created"), Ev(2, "billing.paid")});
  EXPECT_EQ(Broker("orders").AllIds(), std::vector<std::string>{Id(1)});
  EXPECT_EQ(Broker("catch_all").AllIds(), std::vector<std::string>{Id(2)});
}

TEST_F(DispatcherTest, EventWithoutRouteWaitsUntilRoutesChangeAndReachesNoSink) {
  ConfigureOneSink();
  const auto out = Dispatch({Ev(1, "billing.paid", "k", 2), Ev(2, "orders.created")});
  EXPECT_TRUE(Is(out[0], Outcome::kParkNoRoute));
  EXPECT_EQ(out[0].next_attempt_us, INT64_MAX);
  EXPECT_EQ(out[0].attempts, 2);
  EXPECT_TRUE(Contains(out[0].error, "billing.paid"));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").AllIds(), std::vector<std::string>{Id(2)});
}

TEST_F(DispatcherTest, BatchWithOnlyUnroutedEventsCallsNoSink) {
  ConfigureOneSink();
  const auto out = Dispatch({Ev(1, "billing.paid"), Ev(2, "shipping.sent", "k")});
  EXPECT_TRUE(Is(out[0], Outcome::kParkNoRoute));
  EXPECT_TRUE(Is(out[1], Outcome::kParkNoRoute));
  EXPECT_TRUE(Contains(out[1].error, "shipping.sent"));
  EXPECT_EQ(Broker("kafka").created, 0);
  EXPECT_TRUE(Broker("kafka").calls.empty());
}

TEST_F(DispatcherTest, WithoutAnyRouteEverythingWaits) {
  Configure({}, {});
  const auto out = Dispatch({Ev(1, "orders.created")});
  EXPECT_TRUE(Is(out[0], Outcome::kParkNoRoute));
  EXPECT_EQ(out[0].next_attempt_us, INT64_MAX);
}

TEST_F(DispatcherTest, RouteToAMissingSinkWaitsAsUnroutedWithoutAnAttempt) {
  Configure({{"orders.*", "gone", std::nullopt}}, {});
  const auto out = Dispatch({Ev(1, "orders.created", "k", 1)});
  EXPECT_TRUE(Is(out[0], Outcome::kParkNoRoute));
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_EQ(out[0].next_attempt_us, INT64_MAX);
  EXPECT_TRUE(Contains(out[0].error, "gone"));
  EXPECT_TRUE(Broker("gone").calls.empty());
}

TEST_F(DispatcherTest, RouteToAMissingSinkIsNotClaimed) {
  Configure({{"orders.*", "gone", std::nullopt}, {"billing.*", "kafka", std::nullopt}},
            {SinkNamed("kafka")});
  EXPECT_EQ(dispatcher_.DeliverableLikePatterns(), std::vector<std::string>{"billing.%"});
}

// ------------------------------------------------------------ messages

TEST_F(DispatcherTest, SinkReceivesTheEventAsEmitted) {
  ConfigureOneSink();
  Event keyed = Ev(1, "orders.created", "customer-42");
  keyed.payload = "{\"total\":12.5,\"items\":[1,2]}";
  keyed.headers = {{"trace-id", "abc"}, {"tenant", "t1"}};
  keyed.headers_json = "{\"trace-id\":\"abc\",\"tenant\":\"t1\"}";
  Event unkeyed = Ev(2, "orders.paid");
  const auto out = Dispatch({keyed, unkeyed});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));

  ASSERT_EQ(Broker("kafka").calls.size(), 1u);
  ASSERT_EQ(Broker("kafka").calls[0].size(), 2u);
  const SentMessage &m = Broker("kafka").calls[0][0];
  EXPECT_EQ(m.id, Id(1));
  EXPECT_EQ(m.topic, "orders.created");
  EXPECT_EQ(m.target, "orders.created");
  EXPECT_TRUE(m.has_key);
  EXPECT_EQ(m.key, "customer-42");
  EXPECT_EQ(m.payload, "{\"total\":12.5,\"items\":[1,2]}");
  const std::vector<std::pair<std::string, std::string>> headers = {{"trace-id", "abc"},
                                                                    {"tenant", "t1"}};
  EXPECT_EQ(m.headers, headers);
  EXPECT_EQ(m.headers_json, "{\"trace-id\":\"abc\",\"tenant\":\"t1\"}");

  const SentMessage &u = Broker("kafka").calls[0][1];
  EXPECT_EQ(u.id, Id(2));
  EXPECT_FALSE(u.has_key);
  EXPECT_TRUE(u.headers.empty());
  EXPECT_EQ(u.headers_json, "{}");
  EXPECT_EQ(u.payload, "{\"n\":2}");
}

TEST_F(DispatcherTest, EmptyKeyIsStillAKey) {
  ConfigureOneSink();
  Dispatch({Ev(1, "orders.created", "")});
  ASSERT_EQ(Broker("kafka").calls.size(), 1u);
  EXPECT_TRUE(Broker("kafka").calls[0][0].has_key);
  EXPECT_EQ(Broker("kafka").calls[0][0].key, "");
}

TEST_F(DispatcherTest, BatchReachesTheSinkInOneCallInIdOrder) {
  ConfigureOneSink();
  Dispatch({Ev(1, "orders.a", "k1"), Ev(2, "orders.b"), Ev(3, "orders.a", "k1"),
            Ev(4, "orders.c", "k2")});
  ASSERT_EQ(Broker("kafka").calls.size(), 1u);
  EXPECT_EQ(Broker("kafka").Ids(0), (std::vector<std::string>{Id(1), Id(2), Id(3), Id(4)}));
}

TEST_F(DispatcherTest, EmptyBatchDoesNothing) {
  ConfigureOneSink();
  Dispatch({});
  EXPECT_EQ(Broker("kafka").created, 0);
  EXPECT_TRUE(Broker("kafka").calls.empty());
}

// ------------------------------------------------------------ delivered

TEST_F(DispatcherTest, DeliveredEventIsPublishedWithoutCountingAnAttempt) {
  ConfigureOneSink();
  const auto out = Dispatch({Ev(1, "orders.created", std::nullopt, 2)});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_EQ(out[0].attempts, 2);
  EXPECT_STREQ(out[0].error, "");
  EXPECT_EQ(Broker("kafka").created, 1);
}

TEST_F(DispatcherTest, SinkIsCreatedOnceAndReused) {
  ConfigureOneSink();
  Dispatch({Ev(1, "orders.created")});
  Dispatch({Ev(2, "orders.created")});
  EXPECT_EQ(Broker("kafka").created, 1);
  EXPECT_EQ(Broker("kafka").destroyed, 0);
  EXPECT_EQ(Broker("kafka").last_kind, "kafka");
  ASSERT_EQ(Broker("kafka").last_options.size(), 1u);
  EXPECT_EQ(Broker("kafka").last_options[0].key, "bootstrap.servers");
  EXPECT_EQ(Broker("kafka").last_options[0].text, "k1:9092");
}

// ------------------------------------------------------------ sink down

TEST_F(DispatcherTest, SinkThatDeliversNothingIsDownAndItsEventsWaitWithoutAnAttempt) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &, int) { return Retriable("connection refused"); };
  const auto out =
      Dispatch({Ev(1, "orders.created", std::nullopt, 2), Ev(2, "orders.paid", "k", 0)});
  for (const RowOutcome &o : out) {
    EXPECT_TRUE(Is(o, Outcome::kPark));
    EXPECT_GE(o.next_attempt_us, kNow + kMinUs);
    EXPECT_LE(o.next_attempt_us, kNow + kMaxUs);
    EXPECT_EQ(o.next_attempt_us, out[0].next_attempt_us);  // the sink's one retry time
    EXPECT_TRUE(Contains(o.error, "connection refused"));
  }
  EXPECT_EQ(out[0].attempts, 2);
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), out[0].next_attempt_us);
  EXPECT_TRUE(Contains(SinkStates(), "kafka=down"));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 1) << AllLogs();
  EXPECT_TRUE(Contains(AllLogs(), "\"kafka\""));
}

TEST_F(DispatcherTest, DownSinkIsNotCalledBeforeItsRetryTime) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &, int) { return Retriable("connection refused"); };
  const int64_t retry_at = Dispatch({Ev(1, "orders.created")})[0].next_attempt_us;
  ASSERT_EQ(Broker("kafka").calls.size(), 1u);

  const auto out =
      Dispatch({Ev(1, "orders.created", std::nullopt, 1), Ev(2, "orders.paid", "k")}, retry_at - 1);
  EXPECT_EQ(Broker("kafka").calls.size(), 1u) << "a down sink was called before its retry time";
  EXPECT_EQ(Broker("kafka").created, 1);
  for (const RowOutcome &o : out) {
    EXPECT_TRUE(Is(o, Outcome::kPark));
    EXPECT_EQ(o.next_attempt_us, retry_at);
    EXPECT_TRUE(Contains(o.error, "unavailable"));
    EXPECT_TRUE(Contains(o.error, "connection refused"));
  }
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 1) << AllLogs();
}

TEST_F(DispatcherTest, DownSinkIsTriedAgainAtItsRetryTimeAndLogsItsRecovery) {
  ConfigureOneSink();
  bool up = false;
  Broker("kafka").script = [&up](const OutMessage &, int) {
    return up ? Delivered() : Retriable("connection refused");
  };
  const int64_t retry_at = Dispatch({Ev(1, "orders.created")})[0].next_attempt_us;

  up = true;
  const auto out = Dispatch({Ev(1, "orders.created"), Ev(2, "orders.paid")}, retry_at);
  ASSERT_EQ(Broker("kafka").calls.size(), 2u);
  EXPECT_EQ(Broker("kafka").Ids(1), (std::vector<std::string>{Id(1), Id(2)}));
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_EQ(out[0].attempts, 0);
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0);
  EXPECT_FALSE(Contains(SinkStates(), "down"));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 1) << AllLogs();
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "available again"), 1) << AllLogs();

  // Staying up logs nothing more.
  Dispatch({Ev(3, "orders.paid")}, retry_at + 1);
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "available again"), 1) << AllLogs();
}

TEST_F(DispatcherTest, ConsecutiveFailuresLogOneWarningAndRecoveryOneLine) {
  ConfigureOneSink();
  bool up = false;
  Broker("kafka").script = [&up](const OutMessage &, int) {
    return up ? Delivered() : Retriable("all brokers down");
  };
  int64_t now = kNow;
  for (int i = 0; i < 5; ++i) {
    const auto out = Dispatch({Ev(1, "orders.created")}, now);
    ASSERT_TRUE(Is(out[0], Outcome::kPark)) << "failure " << i;
    EXPECT_EQ(out[0].attempts, 0) << "an outage counted an attempt";
    EXPECT_GE(out[0].next_attempt_us, now + kMinUs);
    EXPECT_LE(out[0].next_attempt_us, now + kMaxUs);
    now = out[0].next_attempt_us;
  }
  EXPECT_EQ(Broker("kafka").calls.size(), 5u);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 1) << AllLogs();
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "available again"), 0) << AllLogs();

  up = true;
  EXPECT_TRUE(Is(Dispatch({Ev(1, "orders.created")}, now)[0], Outcome::kPublished));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 1) << AllLogs();
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "available again"), 1) << AllLogs();

  // A new outage is a new warning.
  up = false;
  Dispatch({Ev(2, "orders.created")}, now + 1);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 2) << AllLogs();
}

TEST_F(DispatcherTest, OneSinkDownDoesNotStopOtherSinks) {
  Configure({{"orders.*", "down", std::nullopt}, {"payments.*", "up", std::nullopt}},
            {SinkNamed("down"), SinkNamed("up")});
  Broker("down").script = [](const OutMessage &, int) { return Retriable(); };
  auto out = Dispatch({Ev(1, "orders.created"), Ev(2, "payments.made"), Ev(3, "orders.paid")});
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(out[2], Outcome::kPark));

  out = Dispatch({Ev(4, "orders.created"), Ev(5, "payments.made")}, kNow + 1);
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_EQ(Broker("up").AllIds(), (std::vector<std::string>{Id(2), Id(5)}));
  EXPECT_EQ(Broker("down").calls.size(), 1u);
  EXPECT_TRUE(Contains(SinkStates(), "down=down"));
  EXPECT_TRUE(Contains(SinkStates(), "up=connected"));
}

TEST_F(DispatcherTest, TopicsOfADownSinkAreLeftAloneUntilItsRetryTime) {
  Configure({{"orders.*", "down", std::nullopt}, {"payments.*", "up", std::nullopt}},
            {SinkNamed("down"), SinkNamed("up")});
  bool up = false;
  Broker("down").script = [&up](const OutMessage &, int) {
    return up ? Delivered() : Retriable("connection refused");
  };
  EXPECT_TRUE(dispatcher_.TopicsBehindDownSinks(kNow).empty());
  const auto out = Dispatch({Ev(1, "orders.created"), Ev(2, "payments.made")});
  const int64_t retry_at = out[0].next_attempt_us;
  // Both topics of the down sink, parked by the probe or behind it; never
  // the other sink's.
  Dispatch({Ev(3, "orders.paid")}, kNow + 1);
  EXPECT_EQ(dispatcher_.TopicsBehindDownSinks(kNow + 1),
            (std::vector<std::string>{"orders.created", "orders.paid"}));
  // Due for another try: claimed again (one probe per backoff).
  EXPECT_TRUE(dispatcher_.TopicsBehindDownSinks(retry_at).empty());
  // Back: nothing is left alone any more, also after the next outage begins.
  up = true;
  EXPECT_TRUE(Is(Dispatch({Ev(1, "orders.created")}, retry_at)[0], Outcome::kPublished));
  EXPECT_TRUE(dispatcher_.TopicsBehindDownSinks(retry_at).empty());
  up = false;
  Dispatch({Ev(4, "orders.paid")}, retry_at + 1);
  EXPECT_EQ(dispatcher_.TopicsBehindDownSinks(retry_at + 2),
            (std::vector<std::string>{"orders.paid"}));
}

TEST_F(DispatcherTest, NextSinkRetryIsTheEarliestOfTheDownSinks) {
  Configure({{"a.*", "a", std::nullopt}, {"b.*", "b", std::nullopt}},
            {SinkNamed("a"), SinkNamed("b")});
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0);
  Broker("a").script = [](const OutMessage &, int) { return Retriable(); };
  Broker("b").script = [](const OutMessage &, int) { return Retriable(); };
  const int64_t a_at = Dispatch({Ev(1, "a.x")}, kNow)[0].next_attempt_us;
  const int64_t b_at = Dispatch({Ev(2, "b.x")}, kNow + 50)[0].next_attempt_us;
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), std::min(a_at, b_at));
}

// ------------------------------------------------------------ failed attempts

TEST_F(DispatcherTest, TransientFailureWhileOthersAreDeliveredCountsAnAttempt) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(2)}, Retriable("Broker: Not enough in-sync replicas"));
  const auto out =
      Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, 1), Ev(3, "orders.c")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[2], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kRetry));
  EXPECT_EQ(out[1].attempts, 2);
  EXPECT_GE(out[1].next_attempt_us, kNow + kMinUs);
  EXPECT_LE(out[1].next_attempt_us, kNow + kMaxUs);
  EXPECT_TRUE(Contains(out[1].error, "Not enough in-sync replicas"));
  EXPECT_EQ(Broker("kafka").calls.size(), 1u) << "a transient failure is not retried alone";
  EXPECT_FALSE(Contains(SinkStates(), "down"));
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
}

TEST_F(DispatcherTest, EventDiesAfterMaxAttemptsWithAWarningNamingIt) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(2)}, Retriable("timed out"));
  const auto out = Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, kMaxAttempts - 1)});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kDead));
  EXPECT_EQ(out[1].attempts, kMaxAttempts);
  EXPECT_TRUE(Contains(out[1].error, "timed out"));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, Id(2)), 1) << AllLogs();
  EXPECT_TRUE(Contains(AllLogs(), "dead"));
}

TEST_F(DispatcherTest, EventOneAttemptShortOfTheMaximumIsRetried) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(2)});
  const auto out = Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, kMaxAttempts - 2)});
  EXPECT_TRUE(Is(out[1], Outcome::kRetry));
  EXPECT_EQ(out[1].attempts, kMaxAttempts - 1);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, Id(2)), 0) << AllLogs();
}

TEST_F(DispatcherTest, RetryDelayIsWithinTheBackoffBoundsForLaterAttempts) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(2)});
  for (int attempts = 0; attempts < kMaxAttempts - 1; ++attempts) {
    const auto out = Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, attempts)});
    ASSERT_TRUE(Is(out[1], Outcome::kRetry));
    EXPECT_GE(out[1].next_attempt_us, kNow + kMinUs);
    EXPECT_LE(out[1].next_attempt_us, kNow + kMaxUs);
  }
}

// ------------------------------------------------------------ refused messages

TEST_F(DispatcherTest, RejectedMessageInABatchIsRetriedAloneAndCountsNothingWhenDelivered) {
  ConfigureOneSink();
  // Kafka fails the whole produce request; alone, the message goes through.
  Broker("kafka").script = [](const OutMessage &m, int call) {
    return call == 0 && m.id == Id(2) ? Rejected() : Delivered();
  };
  const auto out =
      Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, 1), Ev(3, "orders.c")});
  ASSERT_EQ(Broker("kafka").calls.size(), 2u);
  EXPECT_EQ(Broker("kafka").Ids(0), (std::vector<std::string>{Id(1), Id(2), Id(3)}));
  EXPECT_EQ(Broker("kafka").Ids(1), std::vector<std::string>{Id(2)});
  for (const RowOutcome &o : out) EXPECT_TRUE(Is(o, Outcome::kPublished));
  EXPECT_EQ(out[1].attempts, 1);
}

TEST_F(DispatcherTest, MessageRejectedAgainAloneCountsOneAttemptAndSparesItsNeighbours) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(2)}, Rejected("Broker: Message size too large"));
  const auto out =
      Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, 1), Ev(3, "orders.c")});
  ASSERT_EQ(Broker("kafka").calls.size(), 2u);
  EXPECT_EQ(Broker("kafka").Ids(1), std::vector<std::string>{Id(2)});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[2], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kRetry));
  EXPECT_EQ(out[1].attempts, 2);
  EXPECT_GE(out[1].next_attempt_us, kNow + kMinUs);
  EXPECT_LE(out[1].next_attempt_us, kNow + kMaxUs);
  EXPECT_TRUE(Contains(out[1].error, "Message size too large"));
  EXPECT_FALSE(Contains(SinkStates(), "down"));
}

TEST_F(DispatcherTest, MessageRejectedAloneAtItsLastAttemptIsDead) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(2)}, Rejected("Broker: Topic authorization failed"));
  const auto out = Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, kMaxAttempts - 1)});
  ASSERT_EQ(Broker("kafka").calls.size(), 2u);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kDead));
  EXPECT_EQ(out[1].attempts, kMaxAttempts);
  EXPECT_TRUE(Contains(out[1].error, "Topic authorization failed"));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, Id(2)), 1) << AllLogs();
}

TEST_F(DispatcherTest, RejectedMessageSentAloneCountsAnAttemptAtOnce) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &, int) { return Rejected(); };
  const auto out = Dispatch({Ev(1, "orders.a", std::nullopt, 0)});
  EXPECT_EQ(Broker("kafka").calls.size(), 1u) << "a lone message is not sent twice";
  EXPECT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_FALSE(Contains(SinkStates(), "down")) << "a refusal is not an outage";
}

TEST_F(DispatcherTest, WholeBatchRejectedIsRetriedOneByOneInIdOrder) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int call) {
    if (call == 0) return Rejected();
    return m.id == Id(2) ? Rejected("poison") : Delivered();
  };
  const auto out = Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b"), Ev(3, "orders.c")});
  ASSERT_EQ(Broker("kafka").calls.size(), 4u);
  EXPECT_EQ(Broker("kafka").Ids(1), std::vector<std::string>{Id(1)});
  EXPECT_EQ(Broker("kafka").Ids(2), std::vector<std::string>{Id(2)});
  EXPECT_EQ(Broker("kafka").Ids(3), std::vector<std::string>{Id(3)});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kRetry));
  EXPECT_TRUE(Contains(out[1].error, "poison"));
  EXPECT_TRUE(Is(out[2], Outcome::kPublished));
  EXPECT_FALSE(Contains(SinkStates(), "down"));
}

// ------------------------------------------------------------ lost connections

// A broker that closes the connection over `culprit`: in each call, the
// culprit and every message after it are lost with the connection.
Script ClosesTheConnectionOver(std::string culprit) {
  auto closed_in = std::make_shared<std::set<int>>();
  return [culprit, closed_in](const OutMessage &m, int call) {
    if (m.id == culprit) closed_in->insert(call);
    return closed_in->count(call) != 0 ? LostWithConnection() : Delivered();
  };
}

TEST_F(DispatcherTest, ACulpritThatClosesTheConnectionIsFoundAloneAndOnlyItIsCharged) {
  ConfigureOneSink();
  Broker("kafka").script = ClosesTheConnectionOver(Id(3));
  Broker("kafka").pipelined = true;  // answers carry their time, as a real sink's do
  auto out = Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"), Ev(3, "orders.a", "c"),
                       Ev(4, "orders.a", "d")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(out[2], Outcome::kPark));
  EXPECT_TRUE(Is(out[3], Outcome::kPark));
  // Sent with others once more: lost again, with the new event 5 after it.
  const int64_t t2 = kNow + 2 * kMaxUs;
  out = Dispatch({Ev(3, "orders.a", "c"), Ev(4, "orders.a", "d"), Ev(5, "orders.a", "e")}, t2);
  for (const RowOutcome &o : out) {
    EXPECT_TRUE(Is(o, Outcome::kPark));
    EXPECT_EQ(o.attempts, 0);
  }
  // 3 and 4 were lost with others twice: alone now, one at a time, after
  // the sink's other events (6, and 5, lost once so far).
  const int64_t t3 = kNow + 4 * kMaxUs;
  out = Dispatch({Ev(3, "orders.a", "c"), Ev(4, "orders.a", "d"), Ev(5, "orders.a", "e"),
                  Ev(6, "orders.a", "f"), Ev(8, "orders.a", "c")},
                 t3);
  EXPECT_TRUE(Is(out[4], Outcome::kPark)) << "never ahead of 3, its key's earlier event";
  ASSERT_EQ(Broker("kafka").calls.size(), 4u);
  EXPECT_EQ(Broker("kafka").Ids(2), (std::vector<std::string>{Id(5), Id(6)}));
  EXPECT_EQ(Broker("kafka").Ids(3), std::vector<std::string>{Id(3)});
  EXPECT_TRUE(Is(out[2], Outcome::kPublished));
  EXPECT_TRUE(Is(out[3], Outcome::kPublished));
  EXPECT_TRUE(Is(out[0], Outcome::kPark)) << "lost alone once: not counted yet";
  EXPECT_EQ(out[0].attempts, 0);
  EXPECT_TRUE(Is(out[1], Outcome::kPark)) << "waits for its turn alone";
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(out[1].next_attempt_us, t3) << "due once the batch that had the turn is done";
  EXPECT_NE(std::string(out[1].error).find("turn"), std::string::npos) << out[1].error;
  // 4 alone goes through; 3 alone is lost again, while 7 goes through: charged.
  const int64_t t4 = kNow + 6 * kMaxUs;
  out = Dispatch({Ev(4, "orders.a", "d")}, t4);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").Ids(4), std::vector<std::string>{Id(4)});
  out = Dispatch({Ev(3, "orders.a", "c"), Ev(7, "orders.a", "g")}, kNow + 8 * kMaxUs);
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_EQ(Broker("kafka").Ids(6), std::vector<std::string>{Id(3)});
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
}

TEST_F(DispatcherTest, AWindowLostWithItsConnectionGoesThroughTogetherAfterARestart) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &, int call) {
    return call == 0 ? LostWithConnection() : Delivered();
  };
  auto out = Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"), Ev(3, "orders.b")});
  for (const RowOutcome &o : out) {
    EXPECT_TRUE(Is(o, Outcome::kPark));
    EXPECT_EQ(o.attempts, 0);
  }
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0);
  out = Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"), Ev(3, "orders.b")},
                 kNow + 2 * kMaxUs);
  for (const RowOutcome &o : out) EXPECT_TRUE(Is(o, Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").calls.size(), 2u) << "together, not one by one";
}

TEST_F(DispatcherTest, ASuspectAloneThatFindsNoBrokerMakesTheSinkDownWithoutAnAttempt) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &, int) { return LostWithConnection(); };
  (void)Dispatch({Ev(1, "orders.a", "a")});
  (void)Dispatch({Ev(1, "orders.a", "a")}, kNow + 2 * kMaxUs);
  Broker("kafka").script = [](const OutMessage &, int) { return Retriable("connection refused"); };
  const auto out = Dispatch({Ev(1, "orders.a", "a")}, kNow + 4 * kMaxUs);
  EXPECT_EQ(Broker("kafka").Ids(2), std::vector<std::string>{Id(1)});
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_EQ(out[0].attempts, 0);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "sink \"kafka\" is unavailable"), 1) << AllLogs();
}

TEST_F(DispatcherTest, ASuspectAloneThatCannotConnectIsNeverChargedThoughTheSinkJustAnswered) {
  // A broker restarting during a suspect's turn: the suspect never reached
  // a connection, so whatever the sink answered just before, the sink is
  // down and nothing is charged (read as the cause, an innocent suspect
  // was charged, and ended dead over a few restarts).
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  auto refusing = std::make_shared<bool>(false);
  Script lost = ClosesTheConnectionOver(Id(1));
  Broker("kafka").script = [refusing, lost](const OutMessage &m, int call) {
    if (!*refusing) return lost(m, call);
    return m.id == Id(1) ? CannotConnect() : Delivered();
  };
  (void)Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b")});
  (void)Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b")}, kNow + 2 * kMaxUs);
  *refusing = true;
  int alone_turns = 0;
  int64_t now = kNow + 4 * kMaxUs;
  for (int r = 0; r < 8; ++r, now += 2 * kMaxUs) {
    // An innocent event each round: the sink answers just before the turn.
    const size_t before = Broker("kafka").calls.size();
    const auto out = Dispatch({Ev(1, "orders.a", "a"), Ev(10 + r, "orders.b", "x")}, now);
    for (size_t c = before; c < Broker("kafka").calls.size(); ++c) {
      if (Broker("kafka").Ids(c) == std::vector<std::string>{Id(1)}) ++alone_turns;
    }
    EXPECT_EQ(out[0].attempts, 0) << "round " << r << ": " << out[0].error;
    EXPECT_FALSE(Is(out[0], Outcome::kDead));
  }
  EXPECT_GE(alone_turns, 3) << AllLogs();
  EXPECT_GE(CountLogs(LogLevel::kWarning, "sink \"kafka\" is unavailable"), 1) << AllLogs();
}

TEST_F(DispatcherTest, EventsNeverSentBeforeALostConnectionAreNotSuspected) {
  // 1 on the connection the broker closed, 2 and 3 waiting for their turn
  // on it: only 1 is suspected (sent alone after two such losses); 2 and 3
  // wait as it does and then go with others.
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").script = [](const OutMessage &m, int call) {
    if (call >= 2) return Delivered();
    return m.id == Id(1) ? LostWithConnection() : NotSentBeforeTheLoss();
  };
  for (int round = 0; round < 2; ++round) {
    const auto out =
        Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"), Ev(3, "orders.a", "c")},
                 kNow + 2 * round * kMaxUs);
    for (const RowOutcome &o : out) {
      EXPECT_TRUE(Is(o, Outcome::kPark));
      EXPECT_EQ(o.attempts, 0);
    }
    EXPECT_LE(out[1].next_attempt_us, kNow + 2 * round * kMaxUs + kMaxUs) << "waits as 1 does";
  }
  const auto out = Dispatch(
      {Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"), Ev(3, "orders.a", "c")}, kNow + 4 * kMaxUs);
  ASSERT_EQ(Broker("kafka").calls.size(), 4u) << "1 alone, and 2 with 3";
  EXPECT_EQ(Broker("kafka").Ids(2), (std::vector<std::string>{Id(2), Id(3)}));
  EXPECT_EQ(Broker("kafka").Ids(3), std::vector<std::string>{Id(1)});
  for (const RowOutcome &o : out) EXPECT_TRUE(Is(o, Outcome::kPublished)) << o.error;
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
}

TEST_F(DispatcherTest, ALoneCulpritOnAQuietSinkEndsDeadAndNeverTakesTheSinkDown) {
  // Nothing else reaches the sink (its key's next event waits behind it):
  // only what the culprit does alone can tell.
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").script = ClosesTheConnectionOver(Id(1));
  Event culprit = Ev(1, "orders.a", "k");
  int64_t now = kNow;
  int rounds = 0;
  for (; rounds < 12; ++rounds, now += 2 * kMaxUs) {
    const auto out = Dispatch({culprit}, now);
    culprit.attempts = out[0].attempts;
    if (Is(out[0], Outcome::kDead)) break;
  }
  EXPECT_EQ(culprit.attempts, kMaxAttempts);
  // Twice with others (it was alone in its batch, but not sent alone), once
  // forgiven alone, then charged each time.
  EXPECT_EQ(rounds + 1, 2 + 1 + kMaxAttempts);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
}

TEST_F(DispatcherTest, EventsLostWithACulpritFirstInEveryBatchAreAllPublished) {
  // One connection, and the culprit the oldest event: everything after it
  // is lost with it, every time, and nothing else reaches the sink.
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").script = ClosesTheConnectionOver(Id(1));
  std::vector<Event> pending = {Ev(1, "orders.a", "c"), Ev(2, "orders.a", "a"),
                                Ev(3, "orders.a", "b"), Ev(4, "orders.a", "d")};
  int64_t now = kNow;
  for (int round = 0; round < 30 && !pending.empty(); ++round, now += 2 * kMaxUs) {
    const auto out = Dispatch(pending, now);
    std::vector<Event> left;
    for (size_t i = 0; i < pending.size(); ++i) {
      if (Is(out[i], Outcome::kDead)) {
        EXPECT_EQ(pending[i].id, Id(1)) << "only the culprit dies";
      }
      if (Is(out[i], Outcome::kPublished) || Is(out[i], Outcome::kDead)) continue;
      pending[i].attempts = out[i].attempts;
      left.push_back(pending[i]);
    }
    pending = left;
  }
  EXPECT_TRUE(pending.empty()) << pending.size() << " left";
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
}

TEST_F(DispatcherTest, ABurstOfCulpritsDoesNotKeepAnInnocentSuspectFromItsTurn) {
  // Twenty events the broker closes its connection over, and an innocent
  // event lost with them twice (a suspect, sent alone as they are): its
  // turn comes within a round of theirs, each culprit lost alone counting
  // as its own (not a broker that closes every connection: nobody would
  // ever be charged, and the turns would never reach it).
  std::vector<Event> table = CulpritBurst(20);
  table.push_back(Ev(21, "orders.a", "k"));
  table.push_back(Ev(22, "orders.a", "k"));
  int first_down = -1;
  const auto published = Drain(table, 1000, 10 * 1000, &first_down);
  ASSERT_EQ(published.count(Id(21)), 1u) << AllLogs();
  // Two batches lost with others, then a turn each (the culprits' forgiven),
  // ten milliseconds apart, with room for the backoff of the first two.
  EXPECT_LE(published.at(Id(21)), 2 + 22 + 60) << AllLogs();
  EXPECT_TRUE(first_down < 0 || first_down > published.at(Id(21))) << AllLogs();
  // Its key's next event (a suspect too) follows, and no culprit is
  // published.
  ASSERT_EQ(published.count(Id(22)), 1u) << AllLogs();
  EXPECT_EQ(published.size(), 2u);
}

TEST_F(DispatcherTest, ASuspectHeadingItsKeysLaterEventsHasItsTurnBeforeTheCulpritsClaimedWithIt) {
  // Two hundred events the broker closes its connection over, each on a
  // key of its own, then key k's events, lost with them twice: all are
  // suspects sent alone, one turn at a time. k's first event holds its
  // key's later ones; the culprits hold nobody. k's first event has its
  // turn first instead of behind every culprit claimed before it, and so
  // does each of k's next ones, due as soon as the one before it is
  // through (not a second later).
  std::vector<Event> table = CulpritBurst(200);
  for (int n = 201; n <= 204; ++n) table.push_back(Ev(n, "orders.a", "k"));
  int first_down = -1;
  const auto published = Drain(table, 3000, 10 * 1000, &first_down);
  ASSERT_EQ(published.count(Id(201)), 1u) << AllLogs();
  // Lost with others twice (each time parked for backoff_min, ten
  // cycles), then the first turn.
  EXPECT_LE(published.at(Id(201)), 2 * kMinMs / 10 + 3) << AllLogs();
  // Each of k's events heads the ones after it in turn.
  for (int n = 202; n <= 203; ++n) {
    ASSERT_EQ(published.count(Id(n)), 1u) << n << AllLogs();
    EXPECT_LE(published.at(Id(n)), published.at(Id(n - 1)) + 3) << n;
  }
  // The last of k heads nothing: it has a turn as any suspect does, after
  // the one before it; and no culprit is published.
  ASSERT_EQ(published.count(Id(204)), 1u) << AllLogs();
  EXPECT_GT(published.at(Id(204)), published.at(Id(203)));
  EXPECT_EQ(published.size(), 4u);
  // Only culprits left, each tried once: the sink is judged down then, not
  // before.
  EXPECT_TRUE(first_down < 0 || first_down > published.at(Id(204))) << AllLogs();
}

TEST_F(DispatcherTest, ASuspectIsHandedToItsSinkAsAMessageAlone) {
  // Its own group is not enough: a pipelining sink would put it on the
  // connection beside other groups' messages, and a loss over one of those
  // would read as its own. The sink is told (Sink::SendAlone).
  const std::vector<Event> events = ThreeSuspectsSentAlone();
  const size_t before = Broker("kafka").calls.size();
  (void)Dispatch({events[0], Ev(4, "orders.a", "d")}, kNow + 4 * kMaxUs);
  ASSERT_EQ(Broker("kafka").calls.size(), before + 2);
  EXPECT_EQ(Broker("kafka").Ids(before), std::vector<std::string>{Id(4)});
  EXPECT_EQ(Broker("kafka").alone_calls.count(before), 0u);
  EXPECT_EQ(Broker("kafka").Ids(before + 1), std::vector<std::string>{Id(1)});
  EXPECT_EQ(Broker("kafka").alone_calls.count(before + 1), 1u);
}

// A batch's group for the sink goes first, then a suspect alone on the same
// sink. The producer fails (or wears out) as the first group is sent: it is
// not replaced for the suspect while the first group awaits its answers
// (destroying it would free what that group waits on), only once idle.
TEST_F(DispatcherTest, AFailedProducerIsNotReplacedUnderAGroupOfItsOwnBatchAwaitingAnswers) {
  ExpectNotReplacedUnderItsOwnGroup([](FakeBroker *b) { b->needs_recreate = true; });
}

TEST_F(DispatcherTest, AWornProducerIsNotReplacedUnderAGroupOfItsOwnBatchAwaitingAnswers) {
  ExpectNotReplacedUnderItsOwnGroup([](FakeBroker *b) { b->worn = true; });
}

TEST_F(DispatcherTest, CulpritsGivenFollowersKeepNoSuspectHeadingNothingFromItsTurn) {
  // A hundred culprits, each with a later event of its key (so each heads
  // it: a lead), and among them the one event of key s, lost with them
  // twice. Leads go ahead of the others only every other turn, and are due
  // among them, not all before them: s has its turn within a few of its
  // place, not after every lead's.
  std::vector<Event> table;
  std::set<std::string, std::less<>> culprits;
  int n = 0;
  std::string lone;
  for (int pair = 1; pair <= 100; ++pair) {
    if (pair == 11) {
      table.push_back(Ev(++n, "orders.a", "s"));
      lone = table.back().id;
    }
    table.push_back(Ev(++n, "orders.a", "c" + std::to_string(pair)));
    culprits.insert(table.back().id);
    table.push_back(Ev(++n, "orders.a", "c" + std::to_string(pair)));
  }
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  auto closed_in = std::make_shared<std::set<int>>();
  Broker("kafka").script = [culprits, closed_in](const OutMessage &m, int call) {
    if (culprits.count(m.id) != 0) closed_in->insert(call);
    return closed_in->count(call) != 0 ? LostWithConnection() : Delivered();
  };
  int first_down = -1;
  const auto published = Drain(table, 400, 10 * 1000, &first_down);
  ASSERT_EQ(published.count(lone), 1u) << AllLogs();
  // Lost with others twice (ten cycles apart), then within about twice its
  // place among the suspects (eleventh).
  EXPECT_LE(published.at(lone), 2 * kMinMs / 10 + 2 * 11 + 5) << AllLogs();
}

TEST_F(DispatcherTest, ASuspectBehindTheLineOfUntriedOnesWaitsNoLongerThanBackoffMax) {
  // Three hundred suspects, none tried yet; 1 fails alone while the sink
  // delivers another event. It goes to the back of the line (299 turns of
  // at least 10 ms: about 3 s), but no retry waits longer than
  // outbox.backoff_max (1 s here): the line was reckoned once and drains
  // meanwhile, and the wait held the event and its key for minutes.
  std::vector<Event> events;
  for (int n = 1; n <= 300; ++n) events.push_back(Ev(n, "orders.a", "c" + std::to_string(n)));
  const int64_t t = LostWithOthersTwice(events);
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? LostWithConnection() : Delivered();
  };
  const auto out = Dispatch({events[0], Ev(301, "orders.a", "z")}, t);
  ASSERT_TRUE(Is(out[1], Outcome::kPublished));
  ASSERT_TRUE(Is(out[0], Outcome::kPark) || Is(out[0], Outcome::kRetry)) << AllLogs();
  EXPECT_GT(out[0].next_attempt_us, t);
  EXPECT_LE(out[0].next_attempt_us, t + kMaxUs);
}

TEST_F(DispatcherTest, SuspectsWaitingForTheTurnAreDueLeadsFirst) {
  // 1, 2 and 3 are suspects; 4, of 3's key, waits behind 3. While 1 has
  // the turn (its batch not finished), 2 and 3 wait for theirs: 3, which
  // holds 4, is due first, though claimed after 2.
  const std::vector<Event> events = {Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"),
                                     Ev(3, "orders.a", "c"), Ev(4, "orders.a", "c")};
  const int64_t t = SuspectsOfADeliveringSink(events);
  auto first = Begin({events[0]}, t);
  auto second = Begin({events[1], events[2], events[3]}, t);
  const RowOutcome &two = second->out[0];
  const RowOutcome &three = second->out[1];
  ASSERT_TRUE(Is(two, Outcome::kPark));
  ASSERT_TRUE(Is(three, Outcome::kPark));
  EXPECT_TRUE(Contains(three.error, "turn")) << three.error;
  EXPECT_LT(three.next_attempt_us, two.next_attempt_us);
  EXPECT_TRUE(Is(second->out[2], Outcome::kPark)) << "4 waits behind 3";
  EXPECT_TRUE(Finish(second.get()));
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, ATriedSuspectIsNotSentAgainWhileAnotherOfItsSinkIsUntriedInAnyClaim) {
  // Three culprits sent alone; 1 and 2 were lost alone (tried) while 3,
  // not tried yet, is in none of the claims that follow (parked a turn
  // apart, or on its way). 1 sent again would be lost alone again, which
  // with 2 tried too reads as a broker that closes every connection: the
  // sink down for its backoff, every key of it held. It waits behind 3.
  const std::vector<Event> events = ThreeSuspectsSentAlone();
  (void)Dispatch({events[0]}, kNow + 4 * kMaxUs);
  (void)Dispatch({events[1]}, kNow + 6 * kMaxUs);
  ASSERT_EQ(Broker("kafka").calls.size(), 4u);
  const int64_t t = kNow + 8 * kMaxUs;
  auto out = Dispatch({events[0]}, t);
  EXPECT_EQ(Broker("kafka").calls.size(), 4u) << "1 is not sent while 3 is untried";
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_EQ(out[0].attempts, 0);
  EXPECT_GT(out[0].next_attempt_us, t) << "due after 3's turn";
  EXPECT_TRUE(Contains(out[0].error, "other suspects")) << out[0].error;
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
  // 3 has its turn, and is lost alone too: each counted as its own loss.
  out = Dispatch({events[2]}, t + 2 * kMaxUs);
  EXPECT_EQ(Broker("kafka").Ids(4), std::vector<std::string>{Id(3)});
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
  // Every one tried, and none of them answered: then 1 lost alone again is
  // the broker's doing.
  out = Dispatch({events[0]}, t + 4 * kMaxUs);
  EXPECT_EQ(Broker("kafka").Ids(5), std::vector<std::string>{Id(1)});
  EXPECT_EQ(out[0].attempts, 0);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "sink \"kafka\" is unavailable"), 1) << AllLogs();
}

TEST_F(DispatcherTest, ATriedSuspectWaitsForAnUntriedOneThatNeverComesOnlyUntilBackoffMax) {
  // 3 is sent alone but never claimed again (its route paused, its key slot
  // moved to another publisher): 1 waits for it only until who was tried is
  // forgotten (outbox.backoff_max, 1 s here), not for good.
  const std::vector<Event> events = ThreeSuspectsSentAlone();
  const int64_t t = kNow + 4 * kMaxUs;
  (void)Dispatch({events[0]}, t);
  auto out = Dispatch({events[0]}, t + kMaxUs);
  ASSERT_EQ(Broker("kafka").calls.size(), 3u) << "1 waits for 2 and 3";
  EXPECT_GE(out[0].next_attempt_us, t + kMaxUs + kMaxUs * 9 / 10)
      << "until who was tried is forgotten, not claimed again every backoff_min meanwhile";
  EXPECT_LE(out[0].next_attempt_us, t + kMaxUs + kMaxUs);
  (void)Dispatch({events[1]}, t + 2 * kMaxUs);
  ASSERT_EQ(Broker("kafka").calls.size(), 4u);
  out = Dispatch({events[0]}, t + 3 * kMaxUs);
  EXPECT_EQ(Broker("kafka").calls.size(), 4u) << "1 waits for 3";
  std::this_thread::sleep_for(std::chrono::milliseconds(kMaxMs + 50));
  out = Dispatch({events[0]}, t + 4 * kMaxUs);
  ASSERT_EQ(Broker("kafka").calls.size(), 5u) << "past backoff_max 1 goes again";
  EXPECT_EQ(Broker("kafka").Ids(4), std::vector<std::string>{Id(1)});
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();
}

TEST_F(DispatcherTest, EventsWaitingForTheirTurnAloneAreDueATurnApart) {
  // Due all at once, every cycle would claim them all and write them back.
  const std::vector<Event> events = {Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b"),
                                     Ev(3, "orders.a", "c"), Ev(4, "orders.a", "d")};
  const int64_t t = SuspectsOfADeliveringSink(events);
  const auto out = Dispatch(events, t);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  const int64_t spacing = Suspects::kMinTurnSpacingMs * 1000;  // no turn took longer yet
  for (size_t k = 1; k < 4; ++k) {
    EXPECT_TRUE(Is(out[k], Outcome::kPark)) << k;
    EXPECT_EQ(out[k].next_attempt_us, t + static_cast<int64_t>(k - 1) * spacing) << k;
  }
}

TEST_F(DispatcherTest, ALongTurnParksNoSuspectWaitingForItsTurnLongerThanBackoffMax) {
  // 1's turn takes 150 ms (a reconnect under load): the line behind the next
  // turn is spaced 150 ms a place, but nobody waits longer than
  // outbox.backoff_max (1 s here); twenty places would be nearly 3 s, and
  // a turn of seconds parked hundreds for minutes each time they came.
  std::vector<Event> events;
  for (int n = 1; n <= 21; ++n) events.push_back(Ev(n, "orders.a", "k" + std::to_string(n)));
  const int64_t t = SuspectsOfADeliveringSink(events);
  Broker("kafka").on_send = [](const SentMessage &m) {
    if (m.id == Id(1)) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  };
  ASSERT_TRUE(Is(Dispatch({events[0]}, t)[0], Outcome::kPublished));
  Broker("kafka").on_send = nullptr;
  const std::vector<Event> line(events.begin() + 1, events.end());
  const auto out = Dispatch(line, t + 1);
  ASSERT_TRUE(Is(out[0], Outcome::kPublished)) << "2 has the turn";
  int64_t latest = 0;
  for (size_t k = 1; k < out.size(); ++k) {
    ASSERT_TRUE(Is(out[k], Outcome::kPark)) << k;
    EXPECT_TRUE(Contains(out[k].error, "turn")) << out[k].error;
    latest = std::max(latest, out[k].next_attempt_us);
  }
  EXPECT_GT(out[2].next_attempt_us - out[1].next_attempt_us, 100 * 1000) << "a turn apart";
  EXPECT_LE(latest, t + 1 + kMaxUs);
}

TEST_F(DispatcherTest, ASuspectAloneInAPipelinedWindowHoldsItsSinksTurnForTheWholeWindow) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) || m.id == Id(2) ? LostWithConnection() : Delivered();
  };
  (void)Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b")});
  (void)Dispatch({Ev(1, "orders.a", "a"), Ev(2, "orders.a", "b")}, kNow + 2 * kMaxUs);
  Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
  Broker("kafka").pipelined = true;
  // Two batches in flight: 1 goes alone in the first; 2, in the second,
  // waits for its turn (due at once), and so does its key's next event.
  auto first = Begin({Ev(1, "orders.a", "a"), Ev(3, "orders.a", "c")});
  auto second = Begin({Ev(2, "orders.a", "b"), Ev(4, "orders.a", "b")});
  ASSERT_TRUE(Finish(second.get()));
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(first->out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(second->out[0], Outcome::kPark));
  EXPECT_EQ(second->out[0].next_attempt_us, kNow);
  EXPECT_TRUE(Is(second->out[1], Outcome::kPark)) << "behind 2 of its key";
  // The window done, 2 has its turn; its key's next event waits behind it
  // (a group alone goes after the batch's others), and goes next.
  auto out = Dispatch({Ev(2, "orders.a", "b"), Ev(4, "orders.a", "b")}, kNow + 4 * kMaxUs);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  out = Dispatch({Ev(4, "orders.a", "b")}, kNow + 6 * kMaxUs);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
}

// ------------------------------------------------------------ per-key order

TEST_F(DispatcherTest, LaterEventOfAKeyWaitsBehindAnEarlierEventThatFailed) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(1)});
  const auto first = Dispatch({Ev(1, "orders.created", "k"), Ev(2, "orders.created", "other")});
  ASSERT_TRUE(Is(first[0], Outcome::kRetry));
  ASSERT_TRUE(Is(first[1], Outcome::kPublished));
  const int64_t a_retry = first[0].next_attempt_us;

  const auto second =
      Dispatch({Ev(3, "orders.paid", "k", 1), Ev(4, "orders.paid", "other"), Ev(5, "orders.paid")},
               kNow + 10);
  EXPECT_TRUE(Is(second[0], Outcome::kPark));
  EXPECT_EQ(second[0].next_attempt_us, a_retry);
  EXPECT_EQ(second[0].attempts, 1) << "waiting behind another event is not an attempt";
  EXPECT_TRUE(Contains(second[0].error, "earlier event"));
  EXPECT_TRUE(Is(second[1], Outcome::kPublished));
  EXPECT_TRUE(Is(second[2], Outcome::kPublished));
  ASSERT_EQ(Broker("kafka").calls.size(), 2u);
  EXPECT_EQ(Broker("kafka").Ids(1), (std::vector<std::string>{Id(4), Id(5)}));
}

TEST_F(DispatcherTest, EventsParkedBehindAKeyHoldBackLaterOnesToo) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(1)});
  const int64_t a_retry =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "x")})[0].next_attempt_us;
  EXPECT_TRUE(Is(Dispatch({Ev(3, "orders.a", "k")}, kNow + 1)[0], Outcome::kPark));
  const auto out = Dispatch({Ev(4, "orders.a", "k")}, kNow + 2);
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_EQ(out[0].next_attempt_us, a_retry);
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2)}));
}

TEST_F(DispatcherTest, ParkedEventKeepsItsPlaceAfterTheEventItWaitedForIsDelivered) {
  // Event 3 was parked behind event 1; event 1 then goes out alone (a small
  // claim batch). A new event of the key must still wait for event 3.
  ConfigureOneSink();
  bool failing = true;
  Broker("kafka").script = [&failing](const OutMessage &m, int) {
    return failing && m.id == Id(1) ? Retriable() : Delivered();
  };
  const int64_t a_retry =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "x")})[0].next_attempt_us;
  ASSERT_TRUE(Is(Dispatch({Ev(3, "orders.a", "k")}, kNow + 1)[0], Outcome::kPark));
  failing = false;
  ASSERT_TRUE(Is(Dispatch({Ev(1, "orders.a", "k", 1)}, a_retry)[0], Outcome::kPublished));

  const auto out = Dispatch({Ev(4, "orders.a", "k")}, a_retry + 1);
  EXPECT_TRUE(Is(out[0], Outcome::kPark)) << "event 4 overtook the parked event 3";
  EXPECT_GE(out[0].next_attempt_us, a_retry + 1);
  const auto both = Dispatch({Ev(3, "orders.a", "k"), Ev(4, "orders.a", "k")}, a_retry + 2);
  EXPECT_TRUE(Is(both[0], Outcome::kPublished));
  EXPECT_TRUE(Is(both[1], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").AllIds(),
            (std::vector<std::string>{Id(1), Id(2), Id(1), Id(3), Id(4)}));
}

TEST_F(DispatcherTest, EventsOfOneKeyInOneBatchAreSentTogetherInIdOrder) {
  // Within one batch nothing waits yet: both events of key k go in the same
  // call, in id order, and the sink keeps that order per key. The outcome of
  // each is the sink's answer for it (a sink that holds back the later one
  // answers kNotSent: see the tests below).
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(1)});
  const auto out = Dispatch({Ev(1, "orders.created", "k"), Ev(2, "orders.paid", "k")});
  ASSERT_EQ(Broker("kafka").calls.size(), 1u);
  EXPECT_EQ(Broker("kafka").Ids(0), (std::vector<std::string>{Id(1), Id(2)}));
  ASSERT_EQ(Broker("kafka").calls[0][0].key, "k");
  ASSERT_EQ(Broker("kafka").calls[0][1].key, "k");
  EXPECT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));

  // From now on the failed event holds back the key.
  const auto later = Dispatch({Ev(3, "orders.created", "k")}, kNow + 1);
  EXPECT_TRUE(Is(later[0], Outcome::kPark));
  EXPECT_EQ(later[0].next_attempt_us, out[0].next_attempt_us);
}

// A sink holds back (kNotSent) the later messages of a key whose earlier
// message failed in the same call.
Delivery NotSent() {
  return Delivery{DeliveryStatus::kNotSent,
                  "not sent: an earlier event with the same key failed in this batch"};
}

TEST_F(DispatcherTest, KeysOrderBrokenByASplitRequestIsLoggedNamingTheLateEvents) {
  // librdkafka split a key's events over two Produce requests and the broker
  // refused the first while it took the second (README, Limits): the refused
  // event will arrive after a later one of its key. One warning names it;
  // keyless events, other keys and events held back (kNotSent) do not count.
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int call) {
    if (call > 0) return Rejected();  // alone too: it is retried later
    if (m.id == Id(1) || m.id == Id(4)) return Rejected();
    if (m.id == Id(6)) return NotSent();
    return Delivered();
  };
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "other"),
            Ev(4, "orders.a"), Ev(5, "orders.a"), Ev(6, "orders.a", "k")});
  EXPECT_EQ(
      CountLogs(LogLevel::kWarning, "1 event(s) will arrive after a later event of their key"), 1)
      << AllLogs();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, Id(1)), 1) << AllLogs();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, Id(4)), 0) << AllLogs();

  // Every event of a key refused, or delivered in order: nothing to say.
  logs_.clear();
  Broker("kafka").script = FailOnly({Id(8), Id(9)}, Rejected());
  Dispatch({Ev(7, "orders.a", "k2"), Ev(8, "orders.a", "k2"), Ev(9, "orders.a", "k2")});
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "will arrive after"), 0) << AllLogs();
}

TEST_F(DispatcherTest, EventHeldBackByTheSinkWaitsBehindTheFailedOneWithoutAnAttempt) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Retriable("timed out");
    if (m.id == Id(2)) return NotSent();
    return Delivered();
  };
  const auto out =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k", 1), Ev(3, "orders.a", "x")});
  ASSERT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_EQ(out[1].attempts, 1) << "a message the sink did not send is not an attempt";
  EXPECT_EQ(out[1].next_attempt_us, out[0].next_attempt_us);
  EXPECT_STRNE(out[1].error, "");
  EXPECT_TRUE(Is(out[2], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").calls.size(), 1u) << "a held-back message is not retried alone";
  EXPECT_FALSE(Contains(SinkStates(), "down"));

  // Both hold back the key; when due, they go in order.
  EXPECT_TRUE(Is(Dispatch({Ev(4, "orders.a", "k")}, kNow + 1)[0], Outcome::kPark));
  Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
  const auto due =
      Dispatch({Ev(1, "orders.a", "k", 1), Ev(2, "orders.a", "k", 1), Ev(4, "orders.a", "k")},
               out[0].next_attempt_us);
  for (const RowOutcome &o : due) EXPECT_TRUE(Is(o, Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").Ids(1), (std::vector<std::string>{Id(1), Id(2), Id(4)}));
}

TEST_F(DispatcherTest, TheRestOfAChainNotSentForWantOfTimeIsDueAtOnceWithItsFirst) {
  // The next claim must take the whole rest of the chain, in id order, not
  // its first event alone.
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Delivered();
    return Delivery{DeliveryStatus::kNotSent, "not sent yet: the broker answers slowly"};
  };
  const auto out =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k")});
  ASSERT_TRUE(Is(out[0], Outcome::kPublished));
  for (size_t i : {1, 2}) {
    EXPECT_TRUE(Is(out[i], Outcome::kPark));
    EXPECT_EQ(out[i].next_attempt_us, kNow);
  }
}

TEST_F(DispatcherTest, EventNotSentForWantOfTimeHoldsItsKeyBackUntilItGoes) {
  // The sink ran out of time for its call after delivering the key's
  // earlier events (MQTT, NATS and HTTP cut a call short): nothing of the
  // key failed, yet its later events must not overtake the one not sent.
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(2)) {
      return Delivery{DeliveryStatus::kNotSent, "not sent yet: the broker answers slowly"};
    }
    return Delivered();
  };
  const auto out = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k")});
  ASSERT_TRUE(Is(out[0], Outcome::kPublished));
  ASSERT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(out[1].next_attempt_us, kNow);  // due at once
  // A later event of the key, claimed as new, waits behind it, due after
  // it: claims take due events in next_attempt_at order, so the key's head
  // comes first however long its tail.
  Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
  const RowOutcome behind = Dispatch({Ev(3, "orders.a", "k")}, kNow + 1)[0];
  EXPECT_TRUE(Is(behind, Outcome::kPark));
  EXPECT_EQ(behind.next_attempt_us, kNow + 1 + Verdicts::kBehindDueUs);
  // ...and they go in order once it is claimed again.
  const auto due = Dispatch({Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k")}, kNow + 2);
  for (const RowOutcome &o : due) EXPECT_TRUE(Is(o, Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").Ids(Broker("kafka").calls.size() - 1),
            (std::vector<std::string>{Id(2), Id(3)}));
}

TEST_F(DispatcherTest, EventHeldBackByTheSinkKeepsItsPlaceAfterTheFailedOneIsDelivered) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Retriable("timed out");
    if (m.id == Id(2)) return NotSent();
    return Delivered();
  };
  const auto out =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "x")});
  ASSERT_TRUE(Is(out[1], Outcome::kPark));
  // Event 1 goes out alone (a small claim batch); event 2 has not gone yet.
  Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
  const int64_t due = out[0].next_attempt_us;
  ASSERT_TRUE(Is(Dispatch({Ev(1, "orders.a", "k", 1)}, due)[0], Outcome::kPublished));
  const auto later = Dispatch({Ev(4, "orders.a", "k")}, due + 1);
  EXPECT_TRUE(Is(later[0], Outcome::kPark)) << "event 4 overtook the held-back event 2";
}

TEST_F(DispatcherTest, EventHeldBackBehindAMessageThatDiedMayGoAtOnce) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Retriable("timed out");
    if (m.id == Id(2)) return NotSent();
    return Delivered();
  };
  const auto out = Dispatch(
      {Ev(1, "orders.a", "k", kMaxAttempts - 1), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "x")});
  ASSERT_TRUE(Is(out[0], Outcome::kDead));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(out[1].next_attempt_us, kNow);
  // Nothing holds back the key any more.
  Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
  EXPECT_TRUE(Is(Dispatch({Ev(2, "orders.a", "k")}, kNow + 1)[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, EventHeldBackBehindARefusedMessageFollowsItsSoloRetry) {
  ConfigureOneSink();
  // Event 1 is refused on the spot, so the sink holds back event 2; alone,
  // event 1 is refused again (poison).
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Rejected("Broker: Message size too large");
    if (m.id == Id(2)) return NotSent();
    return Delivered();
  };
  const auto out =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "x")});
  ASSERT_EQ(Broker("kafka").calls.size(), 2u);
  EXPECT_EQ(Broker("kafka").Ids(1), std::vector<std::string>{Id(1)}) << "only the refused one";
  ASSERT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(out[1].next_attempt_us, out[0].next_attempt_us);
  EXPECT_TRUE(Is(out[2], Outcome::kPublished));
}

TEST_F(DispatcherTest, EventHeldBackBehindARefusedMessageThatGoesThroughAloneMayGoAtOnce) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int call) {
    if (call > 0) return Delivered();
    if (m.id == Id(1)) return Rejected();
    if (m.id == Id(2)) return NotSent();
    return Delivered();
  };
  const auto out =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "x")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(out[1].next_attempt_us, kNow);
  EXPECT_TRUE(Is(Dispatch({Ev(2, "orders.a", "k")}, kNow + 1)[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, HeldBackMessagesBehindTransientFailuresOnlyMeanTheSinkIsDown) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Retriable("all brokers down") : NotSent();
  };
  const auto out = Dispatch({Ev(1, "orders.a", "k", 1), Ev(2, "orders.a", "k", 1)});
  for (const RowOutcome &o : out) {
    EXPECT_TRUE(Is(o, Outcome::kPark));
    EXPECT_EQ(o.attempts, 1);
    EXPECT_EQ(o.next_attempt_us, out[0].next_attempt_us);
    EXPECT_GE(o.next_attempt_us, kNow + kMinUs);
    EXPECT_LE(o.next_attempt_us, kNow + kMaxUs);
  }
  EXPECT_TRUE(Contains(SinkStates(), "kafka=down"));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 1) << AllLogs();
}

TEST_F(DispatcherTest, WaitingEventAndTheEventsBehindItGoTogetherInOrderWhenDue) {
  ConfigureOneSink();
  bool failing = true;
  Broker("kafka").script = [&failing](const OutMessage &m, int) {
    return failing && m.id == Id(1) ? Retriable() : Delivered();
  };
  const int64_t a_retry =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "x")})[0].next_attempt_us;
  const auto parked = Dispatch({Ev(3, "orders.a", "k")}, kNow + 1);
  ASSERT_TRUE(Is(parked[0], Outcome::kPark));

  failing = false;
  const auto out = Dispatch({Ev(1, "orders.a", "k", 1), Ev(3, "orders.a", "k")}, a_retry);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  ASSERT_EQ(Broker("kafka").calls.size(), 2u);
  EXPECT_EQ(Broker("kafka").Ids(1), (std::vector<std::string>{Id(1), Id(3)}));

  // The key is free again.
  const auto after = Dispatch({Ev(4, "orders.a", "k")}, a_retry + 1);
  EXPECT_TRUE(Is(after[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, EventBehindAWaitingOneIsHeldEvenWhenTheWaitingOneIsNotInTheBatch) {
  // Past the earlier event's retry time, but that event was not claimed in
  // this batch: the later one still may not overtake it.
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(1)});
  const int64_t a_retry =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "x")})[0].next_attempt_us;
  const auto out = Dispatch({Ev(3, "orders.a", "k")}, a_retry + 5);
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_GE(out[0].next_attempt_us, a_retry);
  EXPECT_EQ(Broker("kafka").calls.size(), 1u);
}

TEST_F(DispatcherTest, DeliveredEarlierEventReleasesItsKey) {
  ConfigureOneSink();
  bool failing = true;
  Broker("kafka").script = [&failing](const OutMessage &m, int) {
    return failing && m.id == Id(1) ? Retriable() : Delivered();
  };
  const int64_t a_retry =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "x")})[0].next_attempt_us;
  failing = false;
  EXPECT_TRUE(Is(Dispatch({Ev(1, "orders.a", "k", 1)}, a_retry)[0], Outcome::kPublished));
  EXPECT_TRUE(Is(Dispatch({Ev(3, "orders.a", "k")}, a_retry + 1)[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, DeadEventStopsBlockingItsKey) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(1)});
  const auto first = Dispatch({Ev(1, "orders.a", "k", kMaxAttempts - 2), Ev(2, "orders.a", "x")});
  ASSERT_TRUE(Is(first[0], Outcome::kRetry));
  const int64_t a_retry = first[0].next_attempt_us;
  ASSERT_TRUE(Is(Dispatch({Ev(3, "orders.a", "k")}, kNow + 1)[0], Outcome::kPark));

  // Its last attempt fails: dead. The event parked behind it goes next.
  const auto last =
      Dispatch({Ev(1, "orders.a", "k", kMaxAttempts - 1), Ev(4, "orders.a", "y")}, a_retry);
  ASSERT_TRUE(Is(last[0], Outcome::kDead));
  const auto out = Dispatch({Ev(3, "orders.a", "k"), Ev(5, "orders.a", "k")}, a_retry + 1);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
}

TEST_F(DispatcherTest, EventDeadAtItsFirstFailureNeverBlocksItsKey) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(1)});
  const auto first = Dispatch({Ev(1, "orders.a", "k", kMaxAttempts - 1), Ev(2, "orders.a", "x")});
  ASSERT_TRUE(Is(first[0], Outcome::kDead));
  EXPECT_TRUE(Is(Dispatch({Ev(3, "orders.a", "k")}, kNow + 1)[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, SameKeyOnAnotherRouteIsNotBlocked) {
  Configure({{"orders.*", "kafka", std::nullopt}, {"payments.*", "kafka", std::nullopt}},
            {SinkNamed("kafka")});
  Broker("kafka").script = FailOnly({Id(1)});
  ASSERT_TRUE(Is(Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "x")})[0], Outcome::kRetry));
  const auto out = Dispatch({Ev(3, "payments.made", "k"), Ev(4, "orders.b", "k")}, kNow + 1);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished)) << "another route's key is another order";
  EXPECT_TRUE(Is(out[1], Outcome::kPark)) << "same route (orders.*), other topic: same order";
}

TEST_F(DispatcherTest, OtherKeysAndUnkeyedEventsAreNotBlocked) {
  ConfigureOneSink();
  Broker("kafka").script = FailOnly({Id(1)});
  ASSERT_TRUE(Is(Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "x")})[0], Outcome::kRetry));
  const auto out = Dispatch({Ev(3, "orders.a", "k2"), Ev(4, "orders.a")}, kNow + 1);
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
}

TEST_F(DispatcherTest, EventsOfADownSinkHoldBackLaterEventsOfTheirKey) {
  // Parked by an outage, an event still keeps its place in its key's order.
  ConfigureOneSink();
  bool up = false;
  Broker("kafka").script = [&up](const OutMessage &, int) {
    return up ? Delivered() : Retriable();
  };
  const int64_t retry_at = Dispatch({Ev(1, "orders.a", "k")})[0].next_attempt_us;
  up = true;
  // The sink is back (retry time passed) but event 1 was not claimed.
  const auto out = Dispatch({Ev(2, "orders.a", "k"), Ev(3, "orders.a", "x")}, retry_at);
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(3)}));
}

TEST_F(DispatcherTest, NoteWaitingRebuildsOrderAfterARestart) {
  ConfigureOneSink();
  const int64_t until = kNow + 5'000'000;
  NoteWaiting(Ev(1, "orders.created", "k", 1), until);
  const auto out =
      Dispatch({Ev(2, "orders.paid", "k"), Ev(3, "orders.paid", "k2"), Ev(4, "payments.x", "k")});
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_EQ(out[0].next_attempt_us, until);
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(out[2], Outcome::kParkNoRoute));
  EXPECT_EQ(Broker("kafka").AllIds(), std::vector<std::string>{Id(3)});

  // When the noted event is due it goes first, and the rest follows.
  const auto due = Dispatch({Ev(1, "orders.created", "k", 1), Ev(2, "orders.paid", "k")}, until);
  EXPECT_TRUE(Is(due[0], Outcome::kPublished));
  EXPECT_TRUE(Is(due[1], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").Ids(1), (std::vector<std::string>{Id(1), Id(2)}));
}

TEST_F(DispatcherTest, NoteWaitingIgnoresUnkeyedAndUnroutedEvents) {
  ConfigureOneSink();
  NoteWaiting(Ev(1, "orders.created"), kNow + 5'000'000);
  NoteWaiting(Ev(2, "billing.x", "k"), kNow + 5'000'000);
  const auto out = Dispatch({Ev(3, "orders.created"), Ev(4, "orders.created", "k")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
}

TEST_F(DispatcherTest, ConfigureForgetsTheOrderStateUntilEventsAreNotedAgain) {
  ConfigureOneSink();
  NoteWaiting(Ev(1, "orders.created", "k"), kNow + 5'000'000);
  ConfigureOneSink();
  EXPECT_TRUE(Is(Dispatch({Ev(2, "orders.created", "k")})[0], Outcome::kPublished));
}

// ------------------------------------------------------------ interruption

TEST_F(DispatcherTest, AnEventHeldBackBehindAnInterruptedOneIsLeftAsItWas) {
  // Shutdown while event 1 waits for the broker: it is left as it was (a
  // never-tried row). Event 2, which the sink held back behind it, must be
  // left so too: parked, it would be a due retry ahead of event 1, and a
  // claim after the restart could send it first.
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) {
      g_interrupted = true;
      return Retriable("interrupted");
    }
    return NotSent();
  };
  const auto out = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.b", "k")});
  ASSERT_TRUE(Is(out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(out[1], Outcome::kUntouched));
}

TEST_F(DispatcherTest, InterruptedPublishLeavesUndecidedRowsUntouched) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Delivered();
    g_interrupted = true;  // shutdown requested while waiting for the broker
    return Retriable("interrupted");
  };
  const auto out = Dispatch(
      {Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k", 1), Ev(3, "orders.b", std::nullopt, 2)});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kUntouched));
  EXPECT_EQ(out[1].attempts, 1);
  EXPECT_TRUE(Is(out[2], Outcome::kUntouched));
  EXPECT_EQ(out[2].attempts, 2);
  EXPECT_FALSE(Contains(SinkStates(), "down"));
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0);
}

TEST_F(DispatcherTest, InterruptionWithNothingDeliveredIsNotAnOutage) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &, int) {
    g_interrupted = true;
    return Retriable("interrupted");
  };
  const auto out = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.b")});
  EXPECT_TRUE(Is(out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(out[1], Outcome::kUntouched));
  EXPECT_FALSE(Contains(SinkStates(), "down"));
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 0) << AllLogs();

  // The next batch goes straight to the sink, and the untouched keyed event
  // does not hold back its key.
  g_interrupted = false;
  Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
  const auto next = Dispatch({Ev(1, "orders.a", "k"), Ev(3, "orders.a", "k")}, kNow + 1);
  EXPECT_TRUE(Is(next[0], Outcome::kPublished));
  EXPECT_TRUE(Is(next[1], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").calls.size(), 2u);
}

TEST_F(DispatcherTest, InterruptionDoesNotEndAnOutage) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &, int) { return Retriable(); };
  const int64_t retry_at = Dispatch({Ev(1, "orders.a")})[0].next_attempt_us;
  Broker("kafka").script = [](const OutMessage &, int) {
    g_interrupted = true;
    return Retriable("interrupted");
  };
  EXPECT_TRUE(Is(Dispatch({Ev(1, "orders.a")}, retry_at)[0], Outcome::kUntouched));
  EXPECT_TRUE(Contains(SinkStates(), "kafka=down"));
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "available again"), 0) << AllLogs();
}

// Bug (see report): a shutdown during the solo retry of a refused message
// counts a failed attempt against that event.
TEST_F(DispatcherTest, InterruptionDuringSoloRetryCountsNoAttempt) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int call) {
    if (call == 0) return m.id == Id(2) ? Rejected() : Delivered();
    g_interrupted = true;  // shutdown while the solo retry waits
    return Retriable("interrupted");
  };
  const auto out = Dispatch({Ev(1, "orders.a"), Ev(2, "orders.b", std::nullopt, 1)});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kUntouched));
  EXPECT_EQ(out[1].attempts, 1);
}

// Bug (see report): a refused message in an interrupted call counts an attempt
// without ever having been tried alone.
TEST_F(DispatcherTest, RefusedMessageInAnInterruptedCallCountsNoAttempt) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) return Rejected();
    g_interrupted = true;
    return Retriable("interrupted");
  };
  const auto out = Dispatch({Ev(1, "orders.a", std::nullopt, 1), Ev(2, "orders.b")});
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_TRUE(Is(out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(out[1], Outcome::kUntouched));
}

// ------------------------------------------------------------ sink lifecycle

TEST_F(DispatcherTest, SinkThatCannotBeCreatedIsDownAndItsEventsWait) {
  ConfigureOneSink();
  Broker("kafka").fail_create = true;
  Broker("kafka").create_error = "No such configuration property: \"bootstrap.server\"";
  const auto out = Dispatch({Ev(1, "orders.a", std::nullopt, 1), Ev(2, "orders.b", "k")});
  for (const RowOutcome &o : out) {
    EXPECT_TRUE(Is(o, Outcome::kPark));
    EXPECT_TRUE(Contains(o.error, "bootstrap.server"));
    EXPECT_GE(o.next_attempt_us, kNow + kMinUs);
    EXPECT_LE(o.next_attempt_us, kNow + kMaxUs);
  }
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_TRUE(Contains(SinkStates(), "kafka=down"));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "unavailable"), 1) << AllLogs();
  EXPECT_TRUE(Contains(AllLogs(), "bootstrap.server"));

  // Not rebuilt before the retry time; rebuilt after it.
  const int64_t retry_at = out[0].next_attempt_us;
  Broker("kafka").fail_create = false;
  EXPECT_TRUE(Is(Dispatch({Ev(1, "orders.a")}, retry_at - 1)[0], Outcome::kPark));
  EXPECT_EQ(Broker("kafka").created, 0);
  const auto later = Dispatch({Ev(1, "orders.a")}, retry_at);
  EXPECT_TRUE(Is(later[0], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").created, 1);
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "available again"), 1) << AllLogs();
}

TEST_F(DispatcherTest, FactoryFailureWithoutAMessageStillExplainsTheWait) {
  ConfigureOneSink();
  Broker("kafka").fail_create = true;
  const auto out = Dispatch({Ev(1, "orders.a")});
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_STRNE(out[0].error, "");
}

TEST_F(DispatcherTest, ChangedSinkOptionsRecreateTheSink) {
  ConfigureOneSink();
  Dispatch({Ev(1, "orders.a")});
  ASSERT_EQ(Broker("kafka").created, 1);

  // The same definition again: the producer stays.
  ConfigureOneSink();
  Dispatch({Ev(2, "orders.a")});
  EXPECT_EQ(Broker("kafka").created, 1);
  EXPECT_EQ(Broker("kafka").destroyed, 0);

  SinkDef changed = SinkNamed("kafka");
  changed.options.push_back(SinkOption{"linger.ms", SinkOption::Kind::kString, "5"});
  Configure({{"orders.*", "kafka", std::nullopt}}, {changed});
  EXPECT_EQ(Broker("kafka").destroyed, 1) << "the old producer is closed";
  Dispatch({Ev(3, "orders.a")});
  EXPECT_EQ(Broker("kafka").created, 2);
  ASSERT_EQ(Broker("kafka").last_options.size(), 2u);
  EXPECT_EQ(Broker("kafka").last_options[1].key, "linger.ms");
  EXPECT_EQ(Broker("kafka").last_options[1].text, "5");
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2), Id(3)}));
}

TEST_F(DispatcherTest, ChangedOptionValueOrKindRecreatesTheSink) {
  ConfigureOneSink();
  Dispatch({Ev(1, "orders.a")});

  SinkDef value = SinkNamed("kafka");
  value.options[0].text = "k2:9092";
  Configure({{"orders.*", "kafka", std::nullopt}}, {value});
  Dispatch({Ev(2, "orders.a")});
  EXPECT_EQ(Broker("kafka").created, 2);
  EXPECT_EQ(Broker("kafka").last_options[0].text, "k2:9092");

  SinkDef kind = value;
  kind.kind = "redis";
  Configure({{"orders.*", "kafka", std::nullopt}}, {kind});
  Dispatch({Ev(3, "orders.a")});
  EXPECT_EQ(Broker("kafka").created, 3);
  EXPECT_EQ(Broker("kafka").destroyed, 2);
  EXPECT_EQ(Broker("kafka").last_kind, "redis");
}

TEST_F(DispatcherTest, RemovedSinkIsClosed) {
  Configure({{"orders.*", "a", std::nullopt}, {"payments.*", "b", std::nullopt}},
            {SinkNamed("a"), SinkNamed("b")});
  Dispatch({Ev(1, "orders.a"), Ev(2, "payments.x")});
  ASSERT_EQ(Broker("a").created, 1);
  Configure({{"payments.*", "b", std::nullopt}}, {SinkNamed("b")});
  EXPECT_EQ(Broker("a").destroyed, 1);
  EXPECT_EQ(Broker("b").destroyed, 0);
  EXPECT_FALSE(Contains(SinkStates(), "a="));
  EXPECT_TRUE(Is(Dispatch({Ev(3, "orders.a")})[0], Outcome::kParkNoRoute));
  EXPECT_EQ(Broker("a").created, 1);
}

TEST_F(DispatcherTest, DispatcherClosesItsSinksWhenDestroyed) {
  auto d = std::make_unique<Dispatcher>(&FakeFactory);
  std::vector<RouteRow> routes(1);
  routes[0].pattern = "*";
  routes[0].sink = "kafka";
  std::vector<SinkRow> sinks(1);
  sinks[0].name = "kafka";
  sinks[0].kind = "kafka";
  d->Configure(routes.data(), routes.size(), sinks.data(), sinks.size());
  const Event e = Ev(1, "x");
  std::vector<Header> headers;
  const EventRow row = Row(e, &headers);
  DispatchSettings settings;
  settings.now_us = kNow;
  RowOutcome out;
  BeginAndFinish(d.get(), &row, 1, settings, &out, nullptr);
  EXPECT_TRUE(Is(out, Outcome::kPublished));
  d.reset();
  EXPECT_EQ(Broker("kafka").destroyed, 1);
}

TEST_F(DispatcherTest, SinkWithAFatalErrorIsRecreatedBeforeItsNextUse) {
  ExpectReplacedBeforeItsNextUse([](FakeBroker *b) { b->needs_recreate = true; });
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "recreat"), 1) << AllLogs();
  EXPECT_TRUE(Contains(AllLogs(), "\"kafka\""));
}

// A producer that wrote to many distinct targets (Sink::Worn: a Kafka
// producer keeps every topic it wrote to) is replaced before its next use,
// with a LOG line, not a WARNING: nothing failed.
TEST_F(DispatcherTest, AWornProducerIsReplacedBeforeItsNextUse) {
  ExpectReplacedBeforeItsNextUse([](FakeBroker *b) { b->worn = true; });
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "more distinct targets than one producer keeps"), 1)
      << AllLogs();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, ""), 0) << AllLogs();
}

TEST_F(DispatcherTest, SinkLogLinesComeOutWithTheSinkName) {
  ConfigureOneSink();
  Dispatch({Ev(1, "orders.a")});
  Broker("kafka").pending_logs.push_back(LogLine{LogLevel::kWarning, "broker k1 went away"});
  Broker("kafka").pending_logs.push_back(LogLine{LogLevel::kInfo, "broker k1 is back"});
  ASSERT_EQ(Logs().size(), 2u) << AllLogs();
  EXPECT_EQ(logs_[0].level, LogLevel::kWarning);
  EXPECT_TRUE(Contains(logs_[0].text, "broker k1 went away"));
  EXPECT_TRUE(Contains(logs_[0].text, "kafka"));
  EXPECT_EQ(logs_[1].level, LogLevel::kInfo);
  EXPECT_TRUE(Contains(logs_[1].text, "broker k1 is back"));
  LogLevel level;
  char text[64];
  EXPECT_FALSE(dispatcher_.NextLog(&level, text, sizeof text));
}

TEST_F(DispatcherTest, LogLinesOfAClosedSinkAreNotLost) {
  ConfigureOneSink();
  Dispatch({Ev(1, "orders.a")});
  Broker("kafka").pending_logs.push_back(LogLine{LogLevel::kError, "last words"});
  Configure({}, {});
  EXPECT_EQ(Broker("kafka").destroyed, 1);
  EXPECT_EQ(CountLogs(LogLevel::kError, "last words"), 1) << AllLogs();
}

TEST_F(DispatcherTest, PollServesEverySinkInUse) {
  Configure({{"a.*", "a", std::nullopt}, {"b.*", "b", std::nullopt}},
            {SinkNamed("a"), SinkNamed("b")});
  dispatcher_.Poll();  // nothing created yet: nothing to poll
  Dispatch({Ev(1, "a.x"), Ev(2, "b.x")});
  dispatcher_.Poll();
  dispatcher_.Poll();
  EXPECT_EQ(Broker("a").polls, 2);
  EXPECT_EQ(Broker("b").polls, 2);
}

TEST_F(DispatcherTest, SinkStatesMentionsEverySink) {
  Configure({{"a.*", "a", std::nullopt}, {"b.*", "b", std::nullopt}, {"c.*", "c", std::nullopt}},
            {SinkNamed("a"), SinkNamed("b"), SinkNamed("c")});
  std::string states = SinkStates();
  EXPECT_TRUE(Contains(states, "a="));
  EXPECT_TRUE(Contains(states, "b="));
  EXPECT_TRUE(Contains(states, "c="));

  Broker("a").script = [](const OutMessage &, int) { return Retriable(); };
  Broker("b").state = "connecting";
  Dispatch({Ev(1, "a.x"), Ev(2, "b.x")});
  states = SinkStates();
  EXPECT_TRUE(Contains(states, "a=down"));
  EXPECT_TRUE(Contains(states, "b=connecting"));
  EXPECT_TRUE(Contains(states, "c="));
  EXPECT_FALSE(Contains(states, "c=down"));
}

// ------------------------------------------------------------ known bugs

// Bug (see report): the solo retry of a refused message is sent after an
// earlier event of the same key has just been scheduled for a retry, so the
// later event overtakes it.
TEST_F(DispatcherTest, SoloRetryNeverOvertakesAnEarlierEventOfItsKey) {
  ConfigureOneSink();
  // The broker refuses the whole request; alone, A is refused again and B
  // would be accepted.
  Broker("kafka").script = [](const OutMessage &m, int call) {
    if (call == 0 || m.id == Id(1)) return Rejected();
    return Delivered();
  };
  const auto out = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k")});
  ASSERT_TRUE(Is(out[0], Outcome::kRetry));  // A waits for a retry
  // B must not reach the broker before A does.
  for (size_t c = 1; c < Broker("kafka").calls.size(); ++c) {
    EXPECT_NE(Broker("kafka").Ids(c), std::vector<std::string>{Id(2)})
        << "event 2 was sent alone after event 1 of its key failed";
  }
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(out[1].next_attempt_us, out[0].next_attempt_us);
}

// Bug (see report): same as above when the earlier event failed transiently.
TEST_F(DispatcherTest, SoloRetryNeverOvertakesAnEarlierEventWaitingForARetry) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int call) {
    if (m.id == Id(1)) return Retriable("timed out");
    if (m.id == Id(2) && call == 0) return Rejected();
    return Delivered();
  };
  const auto out =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "x")});
  ASSERT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_TRUE(Is(out[2], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").calls.size(), 1u)
      << "event 2 was sent alone while event 1 of its key waits for a retry";
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
}

// outbox.pause(): a paused route's events wait like unrouted ones (until
// routes change), never reach the sink, and other routes flow.
TEST_F(DispatcherTest, PausedRouteParksItsEventsUntilRoutesChangeAndOthersFlow) {
  Configure({{"orders.*", "kafka", std::nullopt, true}, {"audit.*", "kafka", std::nullopt}},
            {SinkNamed("kafka")});
  const auto out = Dispatch({Ev(1, "orders.created", "k"), Ev(2, "audit.login")});
  EXPECT_TRUE(Is(out[0], Outcome::kParkNoRoute));
  EXPECT_EQ(out[0].next_attempt_us, INT64_MAX);
  EXPECT_TRUE(Contains(out[0].error, "route \"orders.*\" is paused"));
  EXPECT_EQ(out[0].attempts, 0);
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  ASSERT_EQ(Broker("kafka").calls.size(), 1u);
  ASSERT_EQ(Broker("kafka").calls[0].size(), 1u);
  EXPECT_EQ(Broker("kafka").calls[0][0].id, Id(2));
}

TEST_F(DispatcherTest, PausingAndResumingARouteIsLoggedOnce) {
  Configure({{"orders.*", "kafka", std::nullopt}}, {SinkNamed("kafka")});
  Configure({{"orders.*", "kafka", std::nullopt, true}}, {SinkNamed("kafka")});
  Configure({{"orders.*", "kafka", std::nullopt, true}}, {SinkNamed("kafka")});
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "route \"orders.*\" paused"), 1);
  Configure({{"orders.*", "kafka", std::nullopt}}, {SinkNamed("kafka")});
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "route \"orders.*\" resumed"), 1);
  const auto out = Dispatch({Ev(1, "orders.created")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
}

// ------------------------------------------------------------ pipelining

TEST_F(DispatcherTest, BatchesInFlightEachGetTheirOwnOutcomesInOrder) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(5) ? Retriable("timed out") : Delivered();
  };
  auto first = Begin({Ev(1, "orders.a", "k1"), Ev(2, "orders.a", "k2"), Ev(3, "nowhere")});
  auto second = Begin({Ev(4, "orders.a", "k3"), Ev(5, "orders.a", "k4")});
  // Keys no earlier batch carries go to the broker before anything finished.
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2), Id(4), Id(5)}));
  Finish(first.get());
  Finish(second.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(first->out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(first->out[2], Outcome::kParkNoRoute));
  EXPECT_TRUE(Is(second->out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(second->out[1], Outcome::kRetry));

  // The retry holds back the next event of its key, as after one batch.
  Broker("kafka").pipelined = false;
  const auto later = Dispatch({Ev(6, "orders.a", "k4"), Ev(7, "orders.a", "k3")});
  EXPECT_TRUE(Is(later[0], Outcome::kPark));
  EXPECT_TRUE(Is(later[1], Outcome::kPublished));
}

// With two batches in flight, a later event of a key
// must not reach the broker while an earlier one's fate is unknown: the
// consumer saw 0, 2, 1 when event 1 failed and event 2 had already gone.
TEST_F(DispatcherTest, LaterBatchWaitsForAnEarlierBatchOfItsKey) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").script = [](const OutMessage &m, int call) {
    return m.id == Id(2) ? Rejected() : Delivered();
  };
  auto first = Begin({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k")});
  auto second = Begin({Ev(3, "orders.a", "k"), Ev(4, "orders.a", "other")});
  // Only the key no earlier batch carries went out with the second batch.
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2), Id(4)}));
  Finish(first.get());
  Finish(second.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(first->out[1], Outcome::kRetry)) << "refused twice (with its batch, alone)";
  EXPECT_TRUE(Is(second->out[0], Outcome::kPark)) << "behind event 2, never sent";
  EXPECT_TRUE(Is(second->out[1], Outcome::kPublished));
  for (const std::string &id : Broker("kafka").AllIds()) EXPECT_NE(id, Id(3));
}

TEST_F(DispatcherTest, DeferredEventsGoOutWhenTheEarlierBatchSucceeded) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  auto first = Begin({Ev(1, "orders.a", "k")});
  auto second = Begin({Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k")});
  auto third = Begin({Ev(4, "orders.a", "k")});
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1)}));
  Finish(first.get());
  Finish(second.get());
  Finish(third.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(second->out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(second->out[1], Outcome::kPublished));
  EXPECT_TRUE(Is(third->out[0], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2), Id(3), Id(4)}));
}

// A sink that is down for the first batch and back for the second: the
// second batch's event of the key must not overtake the first's.
TEST_F(DispatcherTest, SinkDownAndUpBetweenBatchesKeepsKeyOrder) {
  ConfigureOneSink();
  // Synchronous, like the Redis sink: each Send has its answers at once.
  Broker("kafka").script = [](const OutMessage &, int call) {
    return call == 0 ? Retriable("connection refused") : Delivered();
  };
  auto first = Begin({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "j")});
  auto second = Begin({Ev(3, "orders.a", "k"), Ev(4, "orders.a", "m")});
  Finish(first.get());
  Finish(second.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kPark));
  EXPECT_TRUE(Is(first->out[1], Outcome::kPark));
  EXPECT_TRUE(Is(second->out[0], Outcome::kPark)) << "waits behind event 1 and the sink";
  for (const std::string &id : Broker("kafka").AllIds()) EXPECT_NE(id, Id(3));
}

TEST_F(DispatcherTest, DeferredEventsOfAnInterruptedKeyStayAsTheyWere) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").script = [](const OutMessage &, int) { return Retriable("interrupted"); };
  auto first = Begin({Ev(1, "orders.a", "k")});
  auto second = Begin({Ev(2, "orders.a", "k")});
  g_interrupted = true;
  Finish(first.get());
  Finish(second.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(second->out[0], Outcome::kUntouched));
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1)}));
}

// Red team (956): out of memory half-way through a window used to drop one
// batch and let the next batch's events of the same key go out first. Now
// the whole window is given up: no row of any batch has a verdict, nothing is
// in flight, and the caller abandons its cycle.
TEST_F(DispatcherTest, OutOfMemoryInBeginAbandonsTheWholeWindow) {
  Configure({{"orders.*", "kafka", std::nullopt}, {"pay.*", "other", std::nullopt}},
            {SinkNamed("kafka"), SinkNamed("other")});
  Broker("kafka").pipelined = true;
  Broker("other").throw_on_create = true;
  auto first = Begin({Ev(1, "orders.a", "k")});
  ASSERT_NE(first->ticket, 0u);
  auto second = Begin({Ev(2, "orders.a", "k"), Ev(3, "pay.a", "p")});
  EXPECT_EQ(second->ticket, 0u) << "Begin says it failed";
  EXPECT_EQ(dispatcher_.InFlight(), 0u);
  EXPECT_EQ(Broker("kafka").abandoned, 1) << "the first batch's send is given up";
  EXPECT_TRUE(Is(first->out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(second->out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(second->out[1], Outcome::kUntouched));
  EXPECT_TRUE(Finish(first.get())) << "an abandoned batch is unknown: nothing to do";
  EXPECT_TRUE(Is(first->out[0], Outcome::kUntouched));
  EXPECT_EQ(CountLogs(LogLevel::kError, "window of batches abandoned"), 1);
}

TEST_F(DispatcherTest, OutOfMemoryInFinishAbandonsTheWholeWindow) {
  Configure({{"orders.*", "kafka", std::nullopt}, {"mail.*", "redis", std::nullopt}},
            {SinkNamed("kafka"), SinkNamed("redis")});
  Broker("kafka").pipelined = true;
  Broker("redis").pipelined = true;
  auto first = Begin({Ev(1, "orders.a", "k")});
  auto second = Begin({Ev(2, "orders.a", "k"), Ev(3, "mail.a", "j")});
  EXPECT_TRUE(Finish(first.get()));
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
  // The deferred event 2 is sent when the second batch finishes, through a
  // producer that must be made again (nothing of the window is in flight on
  // it any more): that runs out of memory.
  Broker("kafka").needs_recreate = true;
  Broker("kafka").throw_on_create = true;
  EXPECT_FALSE(Finish(second.get()));
  EXPECT_EQ(dispatcher_.InFlight(), 0u);
  EXPECT_TRUE(Is(second->out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(second->out[1], Outcome::kUntouched)) << "acknowledged, but its window failed";
  for (const std::string &id : Broker("kafka").AllIds()) EXPECT_NE(id, Id(2));
}

TEST_F(DispatcherTest, FinishingALaterBatchFinishesTheEarlierOnesFirst) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  auto first = Begin({Ev(1, "orders.a", "k")});
  auto second = Begin({Ev(2, "orders.a", "k")});
  Finish(second.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(second->out[0], Outcome::kPublished));
  EXPECT_EQ(dispatcher_.InFlight(), 0u);
  Finish(first.get());  // already finished: ignored
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2)}));
}

TEST_F(DispatcherTest, FailedSinkIsNotRecreatedUnderABatchInFlight) {
  ConfigureOneSink();
  auto first = Begin({Ev(1, "orders.a", "k")});
  Broker("kafka").needs_recreate = true;
  auto second = Begin({Ev(2, "orders.a", "j")});
  EXPECT_EQ(Broker("kafka").created, 1);
  EXPECT_EQ(Broker("kafka").destroyed, 0);
  Finish(first.get());
  Finish(second.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished));
  // Once nothing is in flight, the next batch gets a new producer.
  const auto later = Dispatch({Ev(3, "orders.a", "k")});
  EXPECT_EQ(Broker("kafka").created, 2);
  EXPECT_TRUE(Is(later[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, FinishOfAnUnknownBatchLeavesItsRowsAlone) {
  ConfigureOneSink();
  auto begun = Begin({Ev(1, "orders.a", "k")});
  const auto before = begun->out;
  dispatcher_.Finish(begun->ticket + 1000, &Interrupted);
  EXPECT_TRUE(Is(begun->out[0], Outcome::kUntouched));
  EXPECT_EQ(dispatcher_.InFlight(), 1u);
  Finish(begun.get());
  EXPECT_TRUE(Is(begun->out[0], Outcome::kPublished));
}

// In the old build an ERROR between Begin and Finish freed the batch's
// rows and outcome array; the next cycle's batch, allocated at the same
// address, was settled with the old batch's results.
TEST_F(DispatcherTest, AbandonedBatchesAreNeverTouchedAgain) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected() : Delivered();
  };
  auto first = Begin({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "j")});
  const Dispatcher::Ticket stale = first->ticket;
  dispatcher_.AbandonAll();
  EXPECT_EQ(dispatcher_.InFlight(), 0u);
  EXPECT_EQ(Broker("kafka").abandoned, 1);
  // The caller's memory is reused for the next batch, at the same address.
  first->out.assign(first->out.size(), RowOutcome{});
  first->events = {Ev(3, "orders.a", "k"), Ev(4, "orders.a", "j")};
  for (size_t i = 0; i < first->events.size(); ++i) {
    first->rows[i] = Row(first->events[i], &first->headers[i]);
  }
  dispatcher_.Finish(stale, &Interrupted);  // the stale ticket matches nothing
  EXPECT_TRUE(Is(first->out[0], Outcome::kUntouched));
  EXPECT_TRUE(Is(first->out[1], Outcome::kUntouched));
  DispatchSettings settings;
  settings.max_attempts = kMaxAttempts;
  settings.now_us = kNow;
  const Dispatcher::Ticket fresh = dispatcher_.Begin(first->rows.data(), first->rows.size(),
                                                     settings, first->out.data(), &Interrupted);
  EXPECT_NE(fresh, stale);
  dispatcher_.Finish(fresh, &Interrupted);
  EXPECT_TRUE(Is(first->out[0], Outcome::kPublished)) << "event 3, not event 1's refusal";
  EXPECT_TRUE(Is(first->out[1], Outcome::kPublished));
}

TEST_F(DispatcherTest, AnAbandonedGroupStillWarnsOfAnEventItsBrokerRefusedAfterALaterOneOfItsKey) {
  // The broker refused 1 and took 2, of the same key (a Kafka batch split
  // over two requests), before the publisher's transaction failed: 1 will
  // arrive after 2 whatever is decided next, and the WARNING says so.
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").answers_when_abandoned = true;
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected("Broker: Invalid record") : Delivered();
  };
  auto begun = Begin({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "j")});
  dispatcher_.AbandonAll();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "will arrive after a later event of their key"), 1)
      << AllLogs();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, Id(1)), 1) << AllLogs();
}

TEST_F(DispatcherTest, AnAbandonedGroupWithNothingOvertakenSaysNothing) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  Broker("kafka").answers_when_abandoned = true;
  Broker("kafka").stuck_ids = {Id(2)};
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(3) ? Rejected("Broker: Invalid record") : Delivered();
  };
  auto begun = Begin({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k")});
  dispatcher_.AbandonAll();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "will arrive after"), 0) << AllLogs();
}

TEST_F(DispatcherTest, AbandonLetsAFailedSinkBeRecreated) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  auto first = Begin({Ev(1, "orders.a", "k")});
  Broker("kafka").needs_recreate = true;
  dispatcher_.AbandonAll();
  const auto later = Dispatch({Ev(2, "orders.a", "k")});
  EXPECT_EQ(Broker("kafka").created, 2) << "no stale batch keeps the failed producer alive";
  EXPECT_TRUE(Is(later[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, ConfigureAbandonsBatchesInFlight) {
  ConfigureOneSink();
  Broker("kafka").pipelined = true;
  auto first = Begin({Ev(1, "orders.a", "k")});
  // New options: the sink is replaced; no batch may point at the old one.
  SinkDef changed = SinkNamed("kafka");
  changed.options = {SinkOption{"bootstrap.servers", SinkOption::Kind::kString, "k2:9092"}};
  Configure({{"orders.*", "kafka", std::nullopt}}, {changed});
  EXPECT_EQ(dispatcher_.InFlight(), 0u);
  EXPECT_EQ(Broker("kafka").abandoned, 1);
  EXPECT_EQ(Broker("kafka").destroyed, 1);
  Finish(first.get());
  EXPECT_TRUE(Is(first->out[0], Outcome::kUntouched));
  const auto later = Dispatch({Ev(2, "orders.a", "k")});
  EXPECT_TRUE(Is(later[0], Outcome::kPublished));
}

// ------------------------------------------------------------ slow sinks

// Two routes, two sinks: "kafka" pipelined and slow when told, "redis" at once.
class SlowSinkTest : public DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    Configure({{"orders.*", "kafka", std::nullopt}, {"mail.*", "redis", std::nullopt}},
              {SinkNamed("kafka"), SinkNamed("redis")});
    Broker("kafka").pipelined = true;
    ack_wait_ms_ = 50;
  }
  static constexpr int64_t kParkedUntil = kNow + (10000 + Dispatcher::kLateMarginMs) * 1000;

  // `cycles` cycles, `pause_ms` apart, each handing out the late answers
  // that came and then sending one new event of orders.t (its own key);
  // `before(c)`, if given, runs first in cycle c. Returns how many of the
  // last `last` cycles' events were not published at once (left late).
  int LeftLateInLastCycles(int cycles, int last, int pause_ms,
                           const std::function<void(int)> &before = nullptr) {
    int left_late = 0;
    for (int c = 0; c < cycles; ++c) {
      if (before) before(c);
      (void)dispatcher_.LateArrived();
      SettleLate(kNow + c * 1000);
      const auto out =
          Dispatch({Ev(100 + c, "orders.t", "k" + std::to_string(c))}, kNow + c * 1000 + 500);
      if (c >= cycles - last && !Is(out[0], Outcome::kPublished)) ++left_late;
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    }
    return left_late;
  }

  // The "kafka" broker refuses `topic` as a producer not authorised for it
  // (kTargetRefused) and takes every other topic.
  void RefuseTopic(std::string topic) {
    Broker("kafka").script = [topic](const OutMessage &m, int) {
      return m.topic == topic
                 ? Delivery{DeliveryStatus::kTargetRefused, "TOPIC_AUTHORIZATION_FAILED"}
                 : Delivered();
    };
  }
};

TEST_F(SlowSinkTest, ASlowSinkDoesNotHoldUpAnotherSinksOutcomes) {
  Broker("kafka").slow = true;
  const auto out = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "mail.a", "m")});
  EXPECT_TRUE(Is(out[1], Outcome::kPublished)) << "the fast sink's outcome is not held back";
  ASSERT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_EQ(out[0].attempts, 0) << "waiting for an answer is not an attempt";
  EXPECT_EQ(out[0].next_attempt_us, kParkedUntil) << "parked until the sink must have answered";
  EXPECT_NE(std::string(out[0].error).find("waiting for sink \"kafka\""), std::string::npos);
  EXPECT_TRUE(dispatcher_.HasLate());
  EXPECT_FALSE(dispatcher_.LateArrived());
  EXPECT_TRUE(SettleLate(kNow + 1000).empty()) << "nothing to judge before the answer";
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "has not answered within outbox.ack_wait"), 1);

  Broker("kafka").slow = false;  // the answer comes
  EXPECT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(std::string(late[0].id), Id(1));
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  EXPECT_EQ(late[0].attempts, 0);
  EXPECT_EQ(late[0].parked_until_us, kParkedUntil);
  EXPECT_FALSE(dispatcher_.HasLate());
}

// The publisher releases rows parked for a late answer that it does not
// await (their sender exited or gave up the key): it asks for these ids.
TEST_F(SlowSinkTest, TheIdsOfEventsAwaitingLateAnswersAreKnownUntilSettled) {
  Broker("kafka").slow = true;
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.b", "j"), Ev(3, "mail.a", "m")});
  std::vector<std::string> ids = dispatcher_.LateIds();
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, (std::vector<std::string>{Id(1), Id(2)})) << "not the fast sink's event";
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  SettleLate(kNow + 2000);
  EXPECT_TRUE(dispatcher_.LateIds().empty());
}

TEST_F(SlowSinkTest, ALaterEventOfTheKeyWaitsForTheLateAnswerAndGoesAfterIt) {
  Broker("kafka").slow = true;
  Dispatch({Ev(1, "orders.a", "k")});
  // A later event of the key: not sent while the first one's fate is open,
  // and looked at again soon (not after the sink's whole timeout): the
  // answer has been awaited for a millisecond, so in the least step.
  const auto second = Dispatch({Ev(2, "orders.a", "k")}, kNow + 1000);
  ASSERT_TRUE(Is(second[0], Outcome::kPark));
  EXPECT_EQ(second[0].next_attempt_us, kNow + Verdicts::kLateRecheckMinUs);
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1)}));

  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  const auto again = Dispatch({Ev(2, "orders.a", "k")}, kNow + Dispatcher::kLateRecheckUs + 1000);
  EXPECT_TRUE(Is(again[0], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2)}));
}

// A sink that answers nothing of a group gets one more group, a probe; when
// that goes unanswered too, nothing more goes to it, and the claims leave
// its topics alone until answers come (a sink that stopped answering holds
// two groups, not one per cycle).
TEST_F(SlowSinkTest, ASinkAnsweringNothingGetsOneProbeThenNothingMoreAndItsTopicsAreLeftAlone) {
  Broker("kafka").slow = true;
  Dispatch({Ev(1, "orders.a", "k")});
  const auto probe = Dispatch({Ev(2, "orders.b", "other"), Ev(3, "mail.x", "m")}, kNow + 1000);
  EXPECT_TRUE(Is(probe[0], Outcome::kPark)) << "sent as the probe, unanswered";
  EXPECT_NE(std::string(probe[0].error).find("waiting for sink \"kafka\" to answer"),
            std::string::npos);
  EXPECT_TRUE(Is(probe[1], Outcome::kPublished)) << "the other sink goes on";
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2)}));
  // Held now: nothing more goes to it.
  const auto more = Dispatch({Ev(4, "orders.c", "third")}, kNow + 2000);
  ASSERT_TRUE(Is(more[0], Outcome::kPark));
  EXPECT_EQ(more[0].attempts, 0);
  EXPECT_EQ(more[0].next_attempt_us, kNow + Verdicts::kLateRecheckMinUs)
      << "held for 2 ms: looked at again at the least step's next multiple";
  EXPECT_NE(std::string(more[0].error).find("to answer earlier events"), std::string::npos);
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2)}));
  // Held for 300 ms: looked at again on the 500 ms step (at the first of
  // its multiples past 250 ms from now); for 5 s, a second later.
  const auto later = Dispatch({Ev(4, "orders.c", "third")}, kNow + 300000);
  EXPECT_EQ(later[0].next_attempt_us, kNow + 1000000);
  const auto much_later = Dispatch({Ev(4, "orders.c", "third")}, kNow + 5000000);
  EXPECT_EQ(much_later[0].next_attempt_us, kNow + 5000000 + Dispatcher::kLateRecheckUs);
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2)}));
  // The claims leave its topics alone until the answers are in.
  auto topics = dispatcher_.TopicsBehindDownSinks(kNow + 2000);
  EXPECT_EQ(topics, (std::vector<std::string>{"orders.c"}));
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  SettleLate(kNow + 3000);
  EXPECT_TRUE(dispatcher_.TopicsBehindDownSinks(kNow + 3000).empty());
  const auto after = Dispatch({Ev(4, "orders.c", "third")}, kNow + 4000);
  EXPECT_TRUE(Is(after[0], Outcome::kPublished));
}

// A topic the cluster lacks, seen first in a quiet moment: its group gets
// no answer at all. The next group, the probe, is answered: the first was
// the topic's trouble, not the sink's, which takes new events as usual.
TEST_F(SlowSinkTest, AnAnsweredProbeShowsTheSinkWasNotSlowButItsTopic) {
  Broker("kafka").stuck_topics = {"orders.missing"};
  const auto first = Dispatch({Ev(1, "orders.missing", "m")});
  ASSERT_TRUE(Is(first[0], Outcome::kPark));
  const auto probe = Dispatch({Ev(2, "orders.a", "k")}, kNow + 1000);
  EXPECT_TRUE(Is(probe[0], Outcome::kPublished));
  EXPECT_TRUE(dispatcher_.TopicsBehindDownSinks(kNow + 1000).empty());
  const auto next = Dispatch({Ev(3, "orders.b", "j"), Ev(4, "orders.c", "i")}, kNow + 2000);
  EXPECT_TRUE(Is(next[0], Outcome::kPublished));
  EXPECT_TRUE(Is(next[1], Outcome::kPublished));
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "answers within outbox.ack_wait again"), 1);
}

TEST_F(SlowSinkTest, ALateRefusalAmongOthersCostsNoAttemptAndIsRetriedAloneNextTime) {
  // Kafka refuses a whole request for one message: answered late, there is
  // no payload left to try each alone, so none is charged; the sink's next
  // group is waited for in full, where the refused one is tried alone.
  Broker("kafka").slow = true;
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) || m.id == Id(2) ? Rejected() : Delivered();
  };
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "j")});
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 2u);
  for (const LateOutcome &o : late) {
    EXPECT_TRUE(Is(o.outcome, Outcome::kPark));
    EXPECT_EQ(o.outcome.attempts, 0);
  }
  Broker("kafka").slow = true;  // still slow: waited for in full all the same
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected() : Delivered();
  };
  const auto retried =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "j")}, kNow + kMaxUs * 10);
  EXPECT_TRUE(Is(retried[0], Outcome::kRetry)) << "refused alone: an attempt";
  EXPECT_EQ(retried[0].attempts, 1);
  EXPECT_TRUE(Is(retried[1], Outcome::kPublished)) << "its neighbour went through";
  EXPECT_FALSE(dispatcher_.HasLate());
}

TEST_F(SlowSinkTest, ALateFailureCountsAnAttemptAndHoldsTheKeyBack) {
  Broker("kafka").slow = true;
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Retriable("Local: Message timed out") : Delivered();
  };
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "j")});
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 2u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kRetry)) << "delivered beside it: not an outage";
  EXPECT_EQ(late[0].outcome.attempts, 1);
  EXPECT_GT(late[0].outcome.next_attempt_us, kNow + 2000);
  EXPECT_TRUE(Is(late[1].outcome, Outcome::kPublished));
  const auto behind = Dispatch({Ev(3, "orders.a", "k")}, kNow + 3000);
  EXPECT_TRUE(Is(behind[0], Outcome::kPark)) << "behind the retry of its key";
}

TEST_F(SlowSinkTest, AReloadKeepsTheLateGroupsOfSinksThatStayTheSame) {
  Broker("kafka").slow = true;
  Dispatch({Ev(1, "orders.a", "k")});
  // A route added elsewhere: the Kafka sink is the same, its answer still
  // counts, and the key stays held meanwhile.
  Configure({{"orders.*", "kafka", std::nullopt},
             {"mail.*", "redis", std::nullopt},
             {"news.*", "redis", std::nullopt}},
            {SinkNamed("kafka"), SinkNamed("redis")});
  EXPECT_TRUE(dispatcher_.HasLate());
  EXPECT_EQ(Broker("kafka").abandoned, 0);
  const auto behind = Dispatch({Ev(2, "orders.a", "k")}, kNow + 1000);
  EXPECT_TRUE(Is(behind[0], Outcome::kPark));
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  // Its route removed while the answer was awaited: the broker took it, so
  // it is published (sending it again would duplicate it)...
  Broker("kafka").slow = true;
  Dispatch({Ev(3, "orders.a", "j")}, kNow + 3000);
  Configure({{"orders.a", "kafka", std::nullopt}}, {SinkNamed("kafka")});
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto taken = SettleLate(kNow + 4000);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_TRUE(Is(taken[0].outcome, Outcome::kPublished));
  // ...and when it failed, it is routed afresh, due at once, no verdict.
  Broker("kafka").slow = true;
  Broker("kafka").script = [](const OutMessage &, int) {
    return Delivery{DeliveryStatus::kRetriable, "broker: not enough replicas"};
  };
  Dispatch({Ev(4, "orders.a", "i")}, kNow + 5000);
  Configure({{"orders.*", "kafka", std::nullopt}}, {SinkNamed("kafka")});
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto rerouted = SettleLate(kNow + 6000);
  ASSERT_EQ(rerouted.size(), 1u);
  EXPECT_TRUE(Is(rerouted[0].outcome, Outcome::kPark));
  EXPECT_EQ(rerouted[0].outcome.next_attempt_us, kNow + 6000);
}

// A sink changed while an answer is late keeps its old producer for that
// answer: the event the broker took is recorded published, not sent again
// through the new producer; its key waits for it meanwhile; the new sink
// under the name is neither held nor slow because of it; and the old
// producer goes once its answers are in.
TEST_F(SlowSinkTest, ASinkChangedWhileAnAnswerIsLateKeepsItsProducerForThatAnswer) {
  Broker("kafka").slow = true;
  Dispatch({Ev(1, "orders.a", "k")});
  ASSERT_TRUE(dispatcher_.HasLate());
  SinkDef changed = SinkNamed("kafka");
  changed.options = {SinkOption{"bootstrap.servers", SinkOption::Kind::kString, "k2:9092"}};
  Configure({{"orders.*", "kafka", std::nullopt}, {"mail.*", "redis", std::nullopt}},
            {changed, SinkNamed("redis")});
  EXPECT_TRUE(dispatcher_.HasLate());
  EXPECT_EQ(Broker("kafka").abandoned, 0) << "nothing purged";
  EXPECT_EQ(Broker("kafka").destroyed, 0) << "the old producer is kept";
  EXPECT_EQ(dispatcher_.LateIds(), (std::vector<std::string>{Id(1)}));
  const auto behind = Dispatch({Ev(2, "orders.a", "k")}, kNow + 1000);
  EXPECT_TRUE(Is(behind[0], Outcome::kPark)) << "its key waits for the late answer";
  Broker("kafka").slow = false;
  const auto other = Dispatch({Ev(3, "orders.b", "j")}, kNow + 1500);
  EXPECT_TRUE(Is(other[0], Outcome::kPublished)) << "the new producer is not held";
  EXPECT_EQ(Broker("kafka").created, 2);
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_EQ(std::string(late[0].id), Id(1));
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  EXPECT_FALSE(dispatcher_.HasLate());
  EXPECT_EQ(Broker("kafka").destroyed, 1) << "the old producer went with its last answer";
  size_t sends_of_1 = 0;
  for (const std::string &id : Broker("kafka").AllIds()) sends_of_1 += id == Id(1);
  EXPECT_EQ(sends_of_1, 1u) << "sent once";
}

// A sink removed while an answer is late: the answer is still recorded, and
// no sink of that name comes back from judging it.
TEST_F(SlowSinkTest, ASinkRemovedWhileAnAnswerIsLateStillRecordsIt) {
  Broker("kafka").slow = true;
  Dispatch({Ev(1, "orders.a", "k")});
  Configure({{"mail.*", "redis", std::nullopt}}, {SinkNamed("redis")});
  EXPECT_TRUE(dispatcher_.HasLate());
  EXPECT_EQ(Broker("kafka").destroyed, 0);
  Broker("kafka").slow = false;
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").destroyed, 1);
  const std::vector<std::string> patterns = dispatcher_.DeliverableLikePatterns();
  EXPECT_EQ(patterns, (std::vector<std::string>{"mail.%"})) << "no sink \"kafka\" made up";
  char states[256];
  dispatcher_.SinkStates(states, sizeof states);
  EXPECT_EQ(std::string(states).find("kafka"), std::string::npos) << states;
}

// A producer recreated after a fatal error while one of its groups awaits a
// late answer: the group keeps the old producer (never a dangling pointer,
// which the sanitizer build would catch) and its answer is recorded.
TEST_F(SlowSinkTest, AProducerRecreatedAfterAFatalErrorKeepsItsLateGroup) {
  Broker("kafka").stuck_topics = {"orders.a"};
  const auto first = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.b", "j")});
  EXPECT_TRUE(Is(first[1], Outcome::kPublished));
  ASSERT_TRUE(Is(first[0], Outcome::kPark));
  Broker("kafka").needs_recreate = true;
  const auto next = Dispatch({Ev(3, "orders.c", "i")}, kNow + 1000);
  EXPECT_TRUE(Is(next[0], Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").created, 2);
  EXPECT_EQ(Broker("kafka").destroyed, 0) << "kept for its late group";
  Broker("kafka").stuck_topics.clear();
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  EXPECT_EQ(Broker("kafka").destroyed, 1);
}

TEST_F(SlowSinkTest, AbandoningDropsLateGroupsAndTheSinkForgetsThem) {
  Broker("kafka").slow = true;
  Dispatch({Ev(1, "orders.a", "k")});
  ASSERT_TRUE(dispatcher_.HasLate());
  dispatcher_.AbandonAll();
  EXPECT_FALSE(dispatcher_.HasLate());
  EXPECT_EQ(Broker("kafka").abandoned, 1);
  // Abandoning also lets go of producers kept for late groups.
  Dispatch({Ev(2, "orders.a", "j")});
  SinkDef changed = SinkNamed("kafka");
  changed.options = {SinkOption{"bootstrap.servers", SinkOption::Kind::kString, "k2:9092"}};
  Configure({{"orders.*", "kafka", std::nullopt}}, {changed});
  EXPECT_TRUE(dispatcher_.HasLate());
  EXPECT_EQ(Broker("kafka").destroyed, 0);
  dispatcher_.AbandonAll();
  EXPECT_FALSE(dispatcher_.HasLate());
  EXPECT_EQ(Broker("kafka").abandoned, 2);
  EXPECT_EQ(Broker("kafka").destroyed, 1);
}

TEST_F(SlowSinkTest, WithoutAnAckWaitEveryAnswerIsWaitedFor) {
  ack_wait_ms_ = 0;
  const auto out = Dispatch({Ev(1, "orders.a", "k")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_FALSE(dispatcher_.HasLate());
}

// A sink that went down and was then tried again, while that try's answers
// are late: its retry time is past, and the claims leave its topics alone
// until the answers are in. The idle publisher must not take that past
// time for its next wake-up (it spun through empty cycles until the
// answers came): the answers wake it.
TEST_F(SlowSinkTest, ADownSinksRetryTimeWakesThePublisherOnceAndNotWhileItOwesLateAnswers) {
  Broker("kafka").slow = true;
  Broker("kafka").script = [](const OutMessage &, int) {
    return Retriable("Local: Message timed out");
  };
  Dispatch({Ev(1, "orders.a", "k")});
  Broker("kafka").slow = false;  // the answers: every message timed out
  ASSERT_TRUE(dispatcher_.LateArrived());
  SettleLate(kNow + 2000);
  const int64_t retry_at = dispatcher_.NextSinkRetryUs();
  ASSERT_NE(retry_at, 0) << "the sink is down";
  // Claims made at or after the retry time have acted on it: it wakes
  // nobody again (the events left wake the publisher by their own times).
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(retry_at - 1), retry_at);
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(retry_at), 0);
  Broker("kafka").slow = true;  // the sink's next try goes late as well
  Dispatch({Ev(2, "orders.b", "j")}, retry_at + 1000);
  ASSERT_TRUE(dispatcher_.HasLate());
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0);
  Broker("kafka").slow = false;
  Broker("kafka").script = [](const OutMessage &, int) { return Delivered(); };
  ASSERT_TRUE(dispatcher_.LateArrived());
  SettleLate(retry_at + 2000);
  EXPECT_FALSE(dispatcher_.HasLate());
}

// One topic the sink does not answer (a topic the cluster lacks, a partition
// without a leader): only its events wait for late answers. The sink's
// answered events are decided at once, and it takes new events of its other
// topics, and of the stuck topic's other keys; the stuck key's later events
// wait behind it.
TEST_F(SlowSinkTest, ATopicTheSinkDoesNotAnswerHoldsOnlyItsOwnEvents) {
  Broker("kafka").stuck_topics = {"orders.missing"};
  const auto first = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.missing", "m")});
  EXPECT_TRUE(Is(first[0], Outcome::kPublished)) << "answered: decided at once";
  ASSERT_TRUE(Is(first[1], Outcome::kPark));
  EXPECT_EQ(first[1].attempts, 0);
  EXPECT_TRUE(dispatcher_.HasLate());
  EXPECT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)});
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "but not for topic(s) \"orders.missing\""), 1);

  const auto next = Dispatch(
      {Ev(3, "orders.b", "j"), Ev(4, "orders.missing", "m"), Ev(5, "orders.missing", "other")},
      kNow + 1000);
  EXPECT_TRUE(Is(next[0], Outcome::kPublished)) << "the sink's other topics go on";
  EXPECT_TRUE(Is(next[1], Outcome::kPark)) << "behind the stuck event of its key";
  EXPECT_NE(std::string(next[1].error).find("earlier event"), std::string::npos);
  EXPECT_TRUE(Is(next[2], Outcome::kPark)) << "another key of the stuck topic: sent, and late";
  EXPECT_EQ(Broker("kafka").AllIds(), (std::vector<std::string>{Id(1), Id(2), Id(3), Id(5)}));
  EXPECT_TRUE(dispatcher_.TopicsBehindDownSinks(kNow + 1000).empty())
      << "the claims take the sink's topics";

  // The answers come: the stuck topic is refused (Kafka: unknown topic).
  Broker("kafka").stuck_topics.clear();
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.topic == "orders.missing"
               ? Delivery{DeliveryStatus::kTargetRefused, "UNKNOWN_TOPIC_OR_PART"}
               : Delivered();
  };
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 2u);
  for (const LateOutcome &o : late) EXPECT_TRUE(Is(o.outcome, Outcome::kRetry));
  EXPECT_FALSE(dispatcher_.HasLate());
}

// An event left to a late answer is parked for the sink's whole timeout, and
// the next event of its key behind it for a second at a time. Once the
// answer is in, a third event of the key waits as long as the second: not for
// the first one's timeout, which would stall the key although nothing holds
// it back any more (a loaded machine's healthy topic, TAP 099).
TEST_F(SlowSinkTest, OnceALateAnswerIsInTheKeysLaterEventsNoLongerWaitForItsTimeout) {
  Broker("kafka").stuck_topics = {"orders.a"};
  const auto first = Dispatch({Ev(1, "orders.a", "k"), Ev(9, "orders.b", "j")});
  ASSERT_TRUE(Is(first[0], Outcome::kPark));
  ASSERT_EQ(first[0].next_attempt_us, kParkedUntil);
  Broker("kafka").stuck_topics.clear();
  const auto second = Dispatch({Ev(2, "orders.a", "k")}, kNow + 1000);
  ASSERT_TRUE(Is(second[0], Outcome::kPark)) << "behind the late one";
  ASSERT_LE(second[0].next_attempt_us, kNow + 1000 + Dispatcher::kLateRecheckUs);
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  const auto third = Dispatch({Ev(3, "orders.a", "k")}, kNow + 3000);
  ASSERT_TRUE(Is(third[0], Outcome::kPark)) << "behind the second, not yet due";
  EXPECT_LE(third[0].next_attempt_us, second[0].next_attempt_us)
      << "not until the first one's timeout (" << kParkedUntil << ")";
}

// Once a topic went unanswered while the sink answered others, a group
// holding it waits for the others' answers only, not for the whole ack
// wait: the sink's healthy topics keep their latency.
TEST_F(SlowSinkTest, ASuspectTopicDoesNotMakeTheOthersWaitForTheAckWait) {
  ack_wait_ms_ = 3000;
  Broker("kafka").stuck_topics = {"orders.missing"};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.missing", "m")});
  const auto started = std::chrono::steady_clock::now();
  const auto next = Dispatch({Ev(3, "orders.b", "j"), Ev(4, "orders.missing", "n")}, kNow + 1000);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(Is(next[0], Outcome::kPublished));
  EXPECT_TRUE(Is(next[1], Outcome::kPark));
  EXPECT_LT(took, std::chrono::milliseconds(1000)) << "not the 3 s ack wait";
}

// A group holding only a suspect topic's events (retries of a partition
// without a leader, on a sink with no other traffic just now) is given up at
// once too: it does not hold the cycle for the ack wait, which would delay
// every other sink's outcomes.
TEST_F(SlowSinkTest, AGroupOfOnlyASuspectTopicDoesNotHoldTheCycle) {
  ack_wait_ms_ = 400;
  Broker("kafka").stuck_topics = {"orders.missing"};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.missing", "m")});
  // Nothing answered by the sink within an ack wait before the next group.
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  const auto started = std::chrono::steady_clock::now();
  const auto out = Dispatch({Ev(3, "orders.missing", "m3"), Ev(13, "mail.a", "x3")}, kNow + 3000);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished)) << "the other sink's event";
  EXPECT_LT(took, std::chrono::milliseconds(200)) << "not the ack wait";
}

// A Kafka partition without a leader: the topic's other partitions go on
// answering. Those answers do not end the topic's suspicion while one of its
// events is overdue (unanswered for longer than the topic's answers take),
// so a group of nothing but retries for that partition (the sink quiet
// otherwise) still does not hold the cycle.
TEST_F(SlowSinkTest, AnswersForATopicsOtherEventsKeepItSuspectWhileOneOfItsEventsAwaitsAnAnswer) {
  ack_wait_ms_ = 400;
  Broker("kafka").stuck_ids = {Id(2), Id(4)};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.split", "m")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)});
  // Unanswered for longer than the topic's answers take (four times, and
  // the grace), as a leaderless partition's events are.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto other = Dispatch({Ev(3, "orders.split", "ok")}, kNow + 1000);
  EXPECT_TRUE(Is(other[0], Outcome::kPublished)) << "the topic's other partition answers";
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  const auto started = std::chrono::steady_clock::now();
  const auto out = Dispatch({Ev(4, "orders.split", "m4"), Ev(13, "mail.a", "x3")}, kNow + 3000);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_TRUE(Is(out[1], Outcome::kPublished)) << "the other sink's event";
  EXPECT_LT(took, std::chrono::milliseconds(200)) << "not the ack wait";
}

// A Kafka group split over two requests: the broker refuses the first (1,
// key k) within the ack wait and takes the second (2, key k) after it: 1
// arrives after 2 whatever is decided, and the WARNING names it, whether
// the late answer is judged or given up with the publisher's transaction.
TEST_F(SlowSinkTest, AnEventRefusedBeforeTheAckWaitThatALateOneOfItsKeyOvertakesIsNamedInAWarning) {
  ack_wait_ms_ = 400;
  Broker("kafka").stuck_ids = {Id(2)};
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected("Broker: Invalid record") : Delivered();
  };
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "j")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)});
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "will arrive after"), 0) << AllLogs();
  Broker("kafka").stuck_ids.clear();
  ASSERT_TRUE(dispatcher_.LateArrived());
  (void)SettleLate(kNow + 1000);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "(one batch split over two requests): " + Id(1)), 1)
      << AllLogs();
}

TEST_F(SlowSinkTest, AnEventOvertakenByALateOneOfItsKeyIsNamedWhenTheLateAnswerIsGivenUp) {
  ack_wait_ms_ = 400;
  Broker("kafka").answers_when_abandoned = true;
  Broker("kafka").stuck_ids = {Id(2)};
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected("Broker: Invalid record") : Delivered();
  };
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)});
  Broker("kafka").stuck_ids.clear();  // its answer came as the publisher's transaction failed
  dispatcher_.AbandonAll();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "(one batch split over two requests): " + Id(1)), 1)
      << AllLogs();
}

// Both answers late: 1 (key k) refused and 2 (key k) taken, while 3 of the
// group still has none. 2 is handed out published at once; 1 waits for its
// group's verdict. Given up then (the publisher's transaction failed: an
// ERROR, a cancel, a terminate), or judged after its route went, 1 arrives
// after 2 if ever: the WARNING names it either way.
TEST_F(SlowSinkTest, ALateRefusalALaterLateEventOfItsKeyOvertookIsNamedWhenItsGroupIsGivenUp) {
  ack_wait_ms_ = 100;
  Broker("kafka").stuck_ids = {Id(1), Id(2), Id(3)};
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected("Broker: Invalid record") : Delivered();
  };
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.stuck", "j")});
  ASSERT_EQ(dispatcher_.LateIds().size(), 3u);
  Broker("kafka").stuck_ids = {Id(3)};
  (void)dispatcher_.LateArrived();
  const auto early = SettleLate(kNow + 1000);
  ASSERT_EQ(early.size(), 1u) << "2, delivered, is handed out before its group is complete";
  EXPECT_EQ(std::string(early[0].id), Id(2));
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "will arrive after"), 0) << AllLogs();
  dispatcher_.AbandonAll();
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "(one batch split over two requests): " + Id(1)), 1)
      << AllLogs();
}

TEST_F(SlowSinkTest, ALateRefusalWhoseRouteWentIsNamedWhenALaterEventOfItsKeyWasTaken) {
  ack_wait_ms_ = 100;
  Broker("kafka").stuck_ids = {Id(1), Id(2)};
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.id == Id(1) ? Rejected("Broker: Invalid record") : Delivered();
  };
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k")});
  ASSERT_EQ(dispatcher_.LateIds().size(), 2u);
  // The route goes while the answers are awaited: 1 is left out of the
  // group's verdict (routed afresh when due), 2 is published as taken.
  Configure({{"mail.*", "redis", std::nullopt}}, {SinkNamed("kafka"), SinkNamed("redis")});
  Broker("kafka").stuck_ids.clear();
  ASSERT_TRUE(dispatcher_.LateArrived());
  (void)SettleLate(kNow + 1000);
  EXPECT_EQ(CountLogs(LogLevel::kWarning, "(one batch split over two requests): " + Id(1)), 1)
      << AllLogs();
}

// Once none of its events awaits an answer, an answer for the topic ends its
// suspicion: a topic that recovered is waited for as any other again.
TEST_F(SlowSinkTest, AnAnswerEndsATopicsSuspicionOnceNoneOfItsEventsAwaitsOne) {
  ack_wait_ms_ = 400;
  Broker("kafka").stuck_ids = {Id(2)};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.split", "m")});
  Broker("kafka").stuck_ids.clear();
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 1000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  EXPECT_FALSE(dispatcher_.HasLate());
  Dispatch({Ev(3, "orders.split", "ok")}, kNow + 1000);
  Broker("kafka").stuck_ids = {Id(4)};
  std::this_thread::sleep_for(std::chrono::milliseconds(450));
  const auto started = std::chrono::steady_clock::now();
  const auto out = Dispatch({Ev(4, "orders.split", "m4")}, kNow + 3000);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(Is(out[0], Outcome::kPark));
  EXPECT_GE(took, std::chrono::milliseconds(350)) << "waited for as a topic not suspect";
}

// A partition without a leader for a while: when it gets one, its topic's
// late answers come seconds after they were sent. They do not teach the
// publisher that the topic (or the sink) answers slowly: when the trouble
// begins again, the first group holding the topic is given up after four
// times its usual answer time, as the first time, and the sink's other
// topics in the cycle do not wait the whole ack wait.
TEST_F(SlowSinkTest,
       ATopicsAnswersAfterItsPartitionHadNoLeaderDoNotMakeItsNextTroubleHoldTheCycle) {
  ack_wait_ms_ = 400;
  Broker("kafka").stuck_ids = {Id(2)};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.split", "m")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)});
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // no leader meanwhile
  Broker("kafka").stuck_ids.clear();
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 1000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  EXPECT_FALSE(dispatcher_.HasLate());
  Broker("kafka").stuck_ids = {Id(4)};  // the partition loses its leader again
  const auto started = std::chrono::steady_clock::now();
  const auto out = Dispatch({Ev(3, "orders.a", "k3"), Ev(4, "orders.split", "m4")}, kNow + 3000);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_LT(took, std::chrono::milliseconds(300))
      << "the 1.2 s late answer was learnt as the topic's usual time: the group waited the "
         "whole ack wait";
}

// The same with a backlog: the partition's older event waited seconds, a
// younger one (sent while the topic was suspect) only part of the ack wait,
// and both are answered when the partition gets its leader. The younger
// answer, within the wait, is the backlog's too: not measured either.
TEST_F(SlowSinkTest, ABacklogsYoungestAnswersWithinTheAckWaitDoNotMakeTheNextTroubleHoldTheCycle) {
  ack_wait_ms_ = 400;
  Broker("kafka").stuck_ids = {Id(2), Id(3)};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.split", "m")});
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // no leader meanwhile
  const auto younger = Dispatch({Ev(3, "orders.split", "m3")}, kNow + 1000);
  ASSERT_TRUE(Is(younger[0], Outcome::kPark)) << "suspect: left late at once";
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Broker("kafka").stuck_ids.clear();  // the leader is back: both answered
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 2u);
  Broker("kafka").stuck_ids = {Id(5)};  // the partition loses its leader again
  const auto started = std::chrono::steady_clock::now();
  const auto out = Dispatch({Ev(4, "orders.a", "k4"), Ev(5, "orders.split", "m5")}, kNow + 3000);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_LT(took, std::chrono::milliseconds(300))
      << "the younger event's ~300 ms answer was learnt as the topic's usual time\n"
      << AllLogs();
}

// A topic that answers slowly, but within the ack wait, is measured by its
// late answers while suspect: its next groups are waited for and decided in
// the cycle, not left late (their keys held back) again and again.
TEST_F(SlowSinkTest, ATopicThatAnswersSlowlyWithinTheAckWaitIsWaitedForOnceItsAnswersAreMeasured) {
  ack_wait_ms_ = 1000;
  Broker("kafka").answer_after_ms["orders.slow"] = 150;
  const auto first = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.slow", "m")});
  ASSERT_TRUE(Is(first[0], Outcome::kPublished));
  ASSERT_TRUE(Is(first[1], Outcome::kPark)) << "given up after four times the sink's usual time";
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 1000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPublished));
  const auto next = Dispatch({Ev(3, "orders.a", "k3"), Ev(4, "orders.slow", "m4")}, kNow + 2000);
  EXPECT_TRUE(Is(next[0], Outcome::kPublished));
  EXPECT_TRUE(Is(next[1], Outcome::kPublished)) << "waited for, its 150 ms answer measured";
}

// A topic made suspect by one event that got no answer (a partition without
// a leader) whose other events answer within a normal wait, under a steady
// stream with cycles closer together than its answer time. Every group of
// only that topic is given up at once (suspect), so a late group of the
// topic is always open when the previous ones' answers are handed out. Only
// an overdue event keeps the topic suspect: once the partition answers, the
// suspicion ends, and the next groups are waited for (their answers come
// within four times the usual time), not left late for as long as the
// stream lasts.
TEST_F(SlowSinkTest, ASuspectTopicWhoseEventsAllAnswerAgainStopsBeingLeftLateUnderASteadyStream) {
  ack_wait_ms_ = 2000;
  Broker("kafka").answer_after_ms["orders.t"] = 200;
  Broker("kafka").stuck_ids = {Id(1)};
  Dispatch({Ev(1, "orders.t", "p0"), Ev(2, "orders.b", "b")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(1)}) << "orders.t is suspect";
  const int parked_at_end = LeftLateInLastCycles(45, 10, 10, [this](int c) {
    if (c == 25) Broker("kafka").stuck_ids.clear();  // the partition has a leader again
  });
  EXPECT_EQ(parked_at_end, 0)
      << "every event of orders.t answers within 200 ms, four times its usual answer time is "
         "waited for, yet the last 10 cycles' events were left late: the topic stayed suspect";
}

// A partition of orders.t has no leader on the "kafka" cluster; the operator
// routes orders.t to another cluster ("kafka2", which answers all of it
// within 30 ms). The old cluster's event still awaits its answer (up to the
// sink's timeout). Suspicion is the sink's: kafka2 waits for orders.t as for
// any topic, and does not leave its groups late (their keys held back) until
// the old cluster settles.
TEST_F(SlowSinkTest, ATopicMovedToAnotherSinkIsWaitedForThereOnceThatSinkAnswersIt) {
  ack_wait_ms_ = 2000;
  Broker("kafka").stuck_ids = {Id(2)};  // stays unanswered on the old cluster
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.t", "m")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)}) << "orders.t is suspect";
  Broker("kafka2").pipelined = true;
  Broker("kafka2").answer_after_ms["orders.t"] = 30;
  Configure({{"orders.*", "kafka", std::nullopt},
             {"mail.*", "redis", std::nullopt},
             {"orders.t", "kafka2", std::nullopt}},
            {SinkNamed("kafka"), SinkNamed("redis"), SinkNamed("kafka2")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)}) << "still awaited";
  constexpr int kCycles = 10;
  const int parked_at_end = LeftLateInLastCycles(kCycles, 5, 60);
  EXPECT_EQ(Broker("kafka2").AllIds().size(), static_cast<size_t>(kCycles)) << "routed to kafka2";
  EXPECT_EQ(parked_at_end, 0)
      << "kafka2 answers every event of orders.t within 30 ms, yet its last 5 cycles' events "
         "were left late: the old cluster's unanswered event keeps the topic suspect";
}

// The same through a retired producer. The sink's options change while its
// event of orders.t awaits an answer (a partition without a leader): the old
// producer is retired with its late group, and its answers never count for
// the topic (HandOutDelivered and Settle skip retired groups), nor does its
// unanswered row keep the topic suspect. The new producer under the same
// name answers orders.t within 30 ms: its first answer ends the suspicion,
// and its groups are not left late until the retired producer settles.
TEST_F(SlowSinkTest, ASinksNewProducerIsWaitedForOnceItAnswersATopicItsRetiredOneStillOwes) {
  ack_wait_ms_ = 2000;
  Broker("kafka").stuck_ids = {Id(2)};  // stays unanswered on the retired producer
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.t", "m")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)}) << "orders.t is suspect";
  Broker("kafka").answer_after_ms["orders.t"] = 30;
  SinkDef changed = SinkNamed("kafka");
  changed.options = {SinkOption{"bootstrap.servers", SinkOption::Kind::kString, "k2:9092"}};
  Configure({{"orders.*", "kafka", std::nullopt}, {"mail.*", "redis", std::nullopt}},
            {changed, SinkNamed("redis")});
  ASSERT_EQ(dispatcher_.LateIds(), std::vector<std::string>{Id(2)}) << "still awaited";
  const int parked_at_end = LeftLateInLastCycles(10, 5, 60);
  EXPECT_EQ(Broker("kafka").created, 2) << "a new producer";
  EXPECT_EQ(parked_at_end, 0)
      << "the new producer answers every event of orders.t within 30 ms, yet its last 5 cycles' "
         "events were left late: the retired producer's unanswered event keeps the topic suspect";
}

// A refusal is an answer. A broker that refuses a topic promptly, but not
// within CollectGroup's first look (a remote broker's round trip: 150 ms
// here, within outbox.ack_wait), has every retry of that topic answered in
// the cycle, even on a sink with no other traffic: it is not logged as
// slow, and its healthy topics are neither parked nor left alone by the
// claims.
TEST_F(SlowSinkTest, PromptRefusalsOfRetriesDoNotMakeAQuietSinkSlowOrHeld) {
  ack_wait_ms_ = 300;
  RefuseTopic("orders.denied");
  Broker("kafka").answer_after_ms = {{"orders.denied", 150}};
  const auto first = Dispatch({Ev(1, "orders.denied", "d1"), Ev(2, "orders.denied", "d2")});
  ASSERT_TRUE(Is(first[0], Outcome::kRetry)) << "answered within the ack wait";
  ASSERT_TRUE(Is(first[1], Outcome::kRetry));
  // Their backoff passes; the sink has no other traffic meanwhile.
  std::this_thread::sleep_for(std::chrono::milliseconds(350));
  const auto retry1 = Dispatch({Ev(1, "orders.denied", "d1", 1)}, kNow + 1000);
  const auto retry2 = Dispatch({Ev(2, "orders.denied", "d2", 1)}, kNow + 1000);
  EXPECT_TRUE(Is(retry1[0], Outcome::kRetry)) << "the broker answers it within 150 ms";
  EXPECT_TRUE(Is(retry2[0], Outcome::kRetry)) << "the broker answers it within 150 ms";
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "has not answered within outbox.ack_wait"), 0)
      << "it answers every event within half the ack wait";
  EXPECT_FALSE(dispatcher_.LateArrived());  // what the publisher looks at between cycles
  const auto healthy = Dispatch({Ev(3, "orders.a", "k")}, kNow + 1000);
  EXPECT_TRUE(Is(healthy[0], Outcome::kPublished)) << "a healthy topic of the sink";
  EXPECT_TRUE(dispatcher_.TopicsBehindDownSinks(kNow + 1000).empty()) << "the sink is not held";
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (dispatcher_.LateArrived()) SettleLate(kNow + 2000);
}

// The same on a sink that answers other topics: a claim of refused retries
// (outbox.batch_size is 1000 by default) is waited for a few times the
// sink's usual answer time, so that kHeldAfterLateEvents events do not
// await late answers at once and hold a sink that answers everything
// within 40 ms.
TEST_F(SlowSinkTest, AClaimOfPromptlyRefusedRetriesDoesNotHoldAnAnsweringSink) {
  ack_wait_ms_ = 2000;
  RefuseTopic("orders.denied");
  // A broker 30-40 ms away: every answer takes that long.
  Broker("kafka").answer_after_ms = {{"orders.a", 30}, {"orders.denied", 40}};
  const auto first = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.denied", "d0")});
  ASSERT_TRUE(Is(first[0], Outcome::kPublished));
  ASSERT_TRUE(Is(first[1], Outcome::kRetry));
  std::vector<Event> retries;
  for (int i = 0; i < static_cast<int>(Dispatcher::kHeldAfterLateEvents); ++i) {
    retries.push_back(Ev(100 + i, "orders.denied", "r" + std::to_string(i), 1));
  }
  const auto out = Dispatch(retries, kNow + 1000);
  EXPECT_TRUE(Is(out[0], Outcome::kRetry)) << "answered in 40 ms, within 4x the usual 30 ms";
  EXPECT_FALSE(dispatcher_.LateArrived());
  const auto healthy = Dispatch({Ev(5000, "orders.a", "k2")}, kNow + 1000);
  EXPECT_TRUE(Is(healthy[0], Outcome::kPublished)) << "a healthy topic of the sink";
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (dispatcher_.LateArrived()) SettleLate(kNow + 2000);
}

// An operator answers "topic not authorised" on one sink by routing the
// topic to another sink, which takes it in 30 ms: that sink, quiet so far,
// publishes the topic's events in the cycle, is not logged as slow, and
// its other topic is not held.
TEST_F(SlowSinkTest, ATopicRefusedByOneSinkAndRoutedToAnotherDoesNotMakeThatSinkHeld) {
  ack_wait_ms_ = 500;
  RefuseTopic("orders.denied");
  const auto first = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.denied", "d1")});
  ASSERT_TRUE(Is(first[1], Outcome::kRetry));
  Configure({{"orders.denied", "kafka2", std::nullopt},
             {"audit.*", "kafka2", std::nullopt},
             {"orders.*", "kafka", std::nullopt},
             {"mail.*", "redis", std::nullopt}},
            {SinkNamed("kafka"), SinkNamed("kafka2"), SinkNamed("redis")});
  Broker("kafka2").pipelined = true;
  Broker("kafka2").answer_after_ms = {{"orders.denied", 30}, {"audit.a", 30}};
  const auto moved1 = Dispatch({Ev(2, "orders.denied", "d1", 1)}, kNow + 1000);
  const auto moved2 = Dispatch({Ev(3, "orders.denied", "d3")}, kNow + 1000);
  EXPECT_TRUE(Is(moved1[0], Outcome::kPublished)) << "kafka2 takes it in 30 ms";
  EXPECT_TRUE(Is(moved2[0], Outcome::kPublished)) << "kafka2 takes it in 30 ms";
  EXPECT_EQ(CountLogs(LogLevel::kInfo, "has not answered within outbox.ack_wait"), 0);
  EXPECT_FALSE(dispatcher_.LateArrived());
  const auto other = Dispatch({Ev(4, "audit.a", "x")}, kNow + 1000);
  EXPECT_TRUE(Is(other[0], Outcome::kPublished)) << "kafka2's other topic is not held";
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  if (dispatcher_.LateArrived()) SettleLate(kNow + 2000);
}

// A sink that stops answering right after it answered (a broker going
// down) takes no more groups once kHeldAfterLateEvents events await its
// answers, even though each group was given up early as its topics'
// trouble: else it would take a group per cycle, their messages piling up
// in the producer while the outage lasts.
TEST_F(SlowSinkTest, ASinkThatStopsAnsweringIsHeldOnceManyEventsAwaitItsAnswers) {
  ack_wait_ms_ = 2000;
  Dispatch({Ev(1, "orders.a", "k1")});  // answered: the sink is alive
  Broker("kafka").slow = true;          // and answers nothing from now on
  const size_t half = Dispatcher::kHeldAfterLateEvents / 2;
  int n = 10;
  for (int g = 0; g < 2; ++g) {
    std::vector<Event> events;
    for (size_t i = 0; i < half; ++i, ++n)
      events.push_back(Ev(n, "orders.a", "k" + std::to_string(n)));
    const auto out = Dispatch(events, kNow + (g + 1) * 1000);
    EXPECT_TRUE(Is(out[0], Outcome::kPark));
  }
  const size_t sends = Broker("kafka").calls.size();
  const auto held = Dispatch({Ev(2, "orders.b", "j")}, kNow + 3000);
  ASSERT_TRUE(Is(held[0], Outcome::kPark));
  EXPECT_NE(std::string(held[0].error).find("to answer earlier events"), std::string::npos)
      << held[0].error;
  EXPECT_EQ(Broker("kafka").calls.size(), sends) << "nothing more sent to it";
  Broker("kafka").slow = false;  // it answers again: no longer held
  ASSERT_TRUE(dispatcher_.LateArrived());
  SettleLate(kNow + 4000);
  const auto after = Dispatch({Ev(3, "orders.b", "j3")}, kNow + 5000);
  EXPECT_TRUE(Is(after[0], Outcome::kPublished));
}

// An event that goes unanswered beside answered ones is given a few times
// its topic's usual answer time (the sink's, for a new topic), not the ack
// wait; a topic that usually takes longer (a slower broker) is waited for.
TEST_F(SlowSinkTest, AnUnansweredTopicIsGivenUpSoonAndASlowTopicIsWaitedFor) {
  ack_wait_ms_ = 3000;
  Broker("kafka").stuck_topics = {"orders.missing"};
  auto started = std::chrono::steady_clock::now();
  const auto first = Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.missing", "m")});
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::milliseconds(1000));
  EXPECT_TRUE(Is(first[0], Outcome::kPublished));
  EXPECT_TRUE(Is(first[1], Outcome::kPark));

  // A topic whose answers take 60 ms (a slower broker) is waited for that
  // long, and more, before its events are given up.
  ack_wait_ms_ = 2000;
  Broker("kafka").stuck_topics.clear();
  Broker("kafka").answer_after_ms = {{"orders.slow", 60}};
  const auto slow = Dispatch({Ev(3, "orders.slow", "s"), Ev(4, "orders.b", "j")}, kNow + 1000);
  EXPECT_TRUE(Is(slow[1], Outcome::kPublished));
  if (Is(slow[0], Outcome::kPark)) {
    // New to the sink, and slower than what it knows: given up the first
    // time, answered late, and known from then on.
    std::this_thread::sleep_for(std::chrono::milliseconds(80));
    ASSERT_TRUE(dispatcher_.LateArrived());
    const auto late = SettleLate(kNow + 1500);
    auto it = std::find_if(late.begin(), late.end(),
                           [](const LateOutcome &o) { return std::string(o.id) == Id(3); });
    ASSERT_NE(it, late.end());
    EXPECT_TRUE(Is(it->outcome, Outcome::kPublished));
  } else {
    // Waited for at once (a loaded machine made the sink's usual answer
    // time 60 ms or more). The stuck topic's event, answered now that its
    // topic is not stuck, is still to be settled late.
    EXPECT_TRUE(Is(slow[0], Outcome::kPublished));
    ASSERT_TRUE(dispatcher_.LateArrived());
    const auto late = SettleLate(kNow + 1500);
    EXPECT_TRUE(std::any_of(late.begin(), late.end(),
                            [](const LateOutcome &o) { return std::string(o.id) == Id(2); }));
  }
  const auto again = Dispatch({Ev(5, "orders.slow", "t"), Ev(6, "orders.b", "i")}, kNow + 2000);
  EXPECT_TRUE(Is(again[0], Outcome::kPublished)) << "its usual 60 ms are waited for";
  EXPECT_FALSE(dispatcher_.HasLate());
}

// A transient failure answered late for a stuck topic's event, while the
// sink answers others (a partition without a leader times out): no
// attempt, and the sink stays up.
TEST_F(SlowSinkTest, ALateTimeoutOfAStuckTopicCostsNoAttemptAndLeavesTheSinkUp) {
  Broker("kafka").stuck_topics = {"orders.leaderless"};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.leaderless", "m")});
  Broker("kafka").stuck_topics.clear();
  Broker("kafka").script = [](const OutMessage &m, int) {
    return m.topic == "orders.leaderless" ? Retriable("Local: Message timed out") : Delivered();
  };
  ASSERT_TRUE(dispatcher_.LateArrived());
  const auto late = SettleLate(kNow + 2000);
  ASSERT_EQ(late.size(), 1u);
  EXPECT_TRUE(Is(late[0].outcome, Outcome::kPark));
  EXPECT_EQ(late[0].outcome.attempts, 0);
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0) << "the sink is not down";
  const auto after = Dispatch({Ev(3, "orders.b", "j")}, kNow + 3000);
  EXPECT_TRUE(Is(after[0], Outcome::kPublished));
}

// A partition without a leader that gets events faster than cycles go:
// each cycle left one group of them to late answers, and past
// kMaxLateGroups the next was waited for in full, with the sink's healthy
// topics, for the sink's whole timeout (10 s at a time in an outside
// review, at 8 events a second). Once half of that many groups await late
// answers, the suspect topic's events wait unsent, without an attempt, and
// the healthy topics' groups go on.
TEST_F(SlowSinkTest, ASuspectTopicsEventsWaitUnsentOnceManyGroupsAwaitLateAnswers) {
  ack_wait_ms_ = 200;
  Broker("kafka").stuck_topics = {"orders.missing"};
  Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.missing", "m")});
  const int cycles = static_cast<int>(Dispatcher::kLateGroupsBeforeSuspectsWait) + 3;
  std::vector<RowOutcome> last;
  for (int c = 0; c < cycles; ++c) {
    last = Dispatch({Ev(100 + c, "orders.missing", "m" + std::to_string(c)),
                     Ev(300 + c, "orders.b", "j" + std::to_string(c))},
                    kNow + 1000 * (c + 1));
    ASSERT_TRUE(Is(last[1], Outcome::kPublished)) << "cycle " << c << ": the healthy topic";
  }
  EXPECT_LE(dispatcher_.LateIds().size(), Dispatcher::kLateGroupsBeforeSuspectsWait + 1);
  ASSERT_TRUE(Is(last[0], Outcome::kPark));
  EXPECT_EQ(last[0].attempts, 0);
  EXPECT_NE(std::string(last[0].error).find("earlier events of topic \"orders.missing\""),
            std::string::npos)
      << last[0].error;
  const std::vector<std::string> sent = Broker("kafka").AllIds();
  EXPECT_EQ(std::count(sent.begin(), sent.end(), Id(100 + cycles - 1)), 0) << "not sent";
}

TEST_F(SlowSinkTest, LateGroupsAreBoundedAndThenWaitedForInFull) {
  // One late group per sink at a time (above); across sinks, at most
  // kMaxLateGroups: beyond, groups are waited for in full.
  std::vector<RouteDef> routes;
  std::vector<SinkDef> sinks;
  const size_t n = Dispatcher::kMaxLateGroups + 1;
  for (size_t i = 0; i < n; ++i) {
    const std::string name = "slow" + std::to_string(i);
    routes.push_back({"t" + std::to_string(i) + ".*", name, std::nullopt});
    sinks.push_back(SinkNamed(name));
    Broker(name).pipelined = true;
    Broker(name).slow = true;
  }
  Configure(routes, sinks);
  for (size_t i = 0; i + 1 < n; ++i) {
    const auto out = Dispatch({Ev(static_cast<int>(i) + 1, "t" + std::to_string(i) + ".a", "k")});
    ASSERT_TRUE(Is(out[0], Outcome::kPark));
  }
  // The next group cannot go late: it is waited for in full (the fake
  // answers a Collect without a time limit even while slow).
  const auto out = Dispatch({Ev(100, "t" + std::to_string(n - 1) + ".a", "k")});
  EXPECT_TRUE(Is(out[0], Outcome::kPublished));
}

TEST_F(DispatcherTest, ARefusedTopicBesideAnOutageLeavesTheOtherEventsAttemptsAlone) {
  ConfigureOneSink();
  // One topic refused, another timing out (a partition without a leader):
  // the timeouts are the sink's, not the events'.
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.topic == "orders.missing") {
      return Delivery{DeliveryStatus::kTargetRefused, "UNKNOWN_TOPIC_OR_PART: unknown topic"};
    }
    return Retriable("Local: Message timed out");
  };
  const auto out = Dispatch({Ev(1, "orders.missing", "a"), Ev(2, "orders.leaderless", "b")});
  EXPECT_TRUE(Is(out[0], Outcome::kRetry)) << "the refused topic's event counts an attempt";
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_TRUE(Is(out[1], Outcome::kPark)) << "the timed-out one waits for the sink";
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_NE(dispatcher_.NextSinkRetryUs(), 0) << "the sink is down";
}

TEST_F(DispatcherTest, EventsHeldBackBehindARefusedTopicDoNotMakeTheSinkDown) {
  ConfigureOneSink();
  // The sink refuses the topic's first event and holds back the key's next
  // ones (kNotSent): the broker answered, nothing says the sink is down.
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.id == Id(1)) {
      return Delivery{DeliveryStatus::kTargetRefused, "UNKNOWN_TOPIC_OR_PART: unknown topic"};
    }
    return Delivery{DeliveryStatus::kNotSent, "not sent: an earlier event failed"};
  };
  const auto out = Dispatch({Ev(1, "orders.missing", "k"), Ev(2, "orders.missing", "k")});
  EXPECT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_EQ(out[1].attempts, 0);
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0) << "the sink is not down";
}

TEST_F(DispatcherTest, ARefusedTargetCountsAttemptsAndNeverTakesTheSinkDown) {
  ConfigureOneSink();
  Broker("kafka").script = [](const OutMessage &m, int) {
    if (m.topic == "orders.missing") {
      return Delivery{DeliveryStatus::kTargetRefused, "UNKNOWN_TOPIC_OR_PART: unknown topic"};
    }
    return Delivered();
  };
  // The refused topic's events are a call's only events: still not an outage.
  auto out = Dispatch({Ev(1, "orders.missing", "k")});
  ASSERT_TRUE(Is(out[0], Outcome::kRetry));
  EXPECT_EQ(out[0].attempts, 1);
  EXPECT_EQ(dispatcher_.NextSinkRetryUs(), 0) << "the sink is not down";
  EXPECT_EQ(Broker("kafka").calls.size(), 1u) << "not retried alone";
  out = Dispatch({Ev(1, "orders.missing", "k", 2), Ev(2, "orders.ok", "k")}, kNow + kMaxUs * 10);
  EXPECT_TRUE(Is(out[0], Outcome::kDead)) << "its attempts run out";
  EXPECT_TRUE(Is(out[1], Outcome::kPublished));
  EXPECT_EQ(SinkStates(), "kafka=connected");
}

Script CutOffAfter(int delivered_id) {
  return [delivered_id](const OutMessage &m, int) {
    if (m.id == Id(delivered_id)) return Delivered();
    return Delivery{DeliveryStatus::kNotSent, "not sent: cut off for want of time"};
  };
}

// A chain cut off again is due with its first event not sent, even while a
// later event of the key waits parked until later (the key's latest wait).
TEST_F(DispatcherTest, TheRestOfAChainCutOffAgainIsDueWithItsFirstDespiteAParkedTail) {
  ConfigureOneSink();
  Broker("kafka").script = CutOffAfter(1);
  auto b1 = Begin({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k"),
                   Ev(4, "orders.a", "k")});
  auto b2 = Begin({Ev(5, "orders.a", "k")});  // deferred: its key is in flight
  ASSERT_TRUE(Finish(b1.get()));
  ASSERT_TRUE(Finish(b2.get()));
  for (size_t i : {1, 2, 3}) EXPECT_EQ(b1->out[i].next_attempt_us, kNow);
  ASSERT_TRUE(Is(b2->out[0], Outcome::kPark));
  EXPECT_EQ(b2->out[0].next_attempt_us, kNow + Verdicts::kBehindDueUs);
  // Next cycle, 100 ms later: 2 goes, 3 and 4 are cut off again.
  Broker("kafka").script = CutOffAfter(2);
  const int64_t t = kNow + 100000;
  const auto out =
      Dispatch({Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k"), Ev(4, "orders.a", "k")}, t);
  ASSERT_TRUE(Is(out[0], Outcome::kPublished));
  EXPECT_LE(out[1].next_attempt_us, t);  // due
  EXPECT_EQ(out[2].next_attempt_us, out[1].next_attempt_us)
      << "the rest of the chain is not due with its first";
}

// A key's first event not sent is never due after the events parked behind
// it in earlier cycles: claims take due events in next_attempt_at order, up
// to the batch size, and a long tail claimed first would hold the head back.
TEST_F(DispatcherTest, AHeadCutOffAgainIsNeverDueAfterItsParkedTail) {
  ConfigureOneSink();
  Broker("kafka").script = CutOffAfter(1);
  auto b1 = Begin({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k")});
  auto b2 = Begin({Ev(4, "orders.a", "k")});  // the tail, deferred
  ASSERT_TRUE(Finish(b1.get()));
  ASSERT_TRUE(Finish(b2.get()));
  const int64_t tail_due = b2->out[0].next_attempt_us;
  ASSERT_EQ(tail_due, kNow + Verdicts::kBehindDueUs);
  // 3 s later the claim (limit 2) takes 2 and 3 (due at kNow), not 4. The
  // sink cuts the call off again after 2.
  Broker("kafka").script = CutOffAfter(2);
  const int64_t t = kNow + 3000000;
  const auto out = Dispatch({Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k")}, t);
  ASSERT_TRUE(Is(out[0], Outcome::kPublished));
  ASSERT_TRUE(Is(out[1], Outcome::kPark));
  EXPECT_LE(out[1].next_attempt_us, tail_due)
      << "head 3 is due after tail 4: the next claim takes 4 (and the rest of a long tail) "
         "first, and 4 is parked again behind 3";
  // What that next claim does with 4 alone:
  const auto again = Dispatch({Ev(4, "orders.a", "k")}, t + 1000);
  EXPECT_TRUE(Is(again[0], Outcome::kPark));
  EXPECT_EQ(Broker("kafka").calls.size(), 2u);
}

// The rest of a chain cut off while its group was late is judged when the
// group settles, due with its first event not sent, whatever later event of
// the key waits (and whatever time the late park gave the key).
TEST_F(SlowSinkTest, TheRestOfAChainCutOffWhileLateIsDueWithItsFirst) {
  Broker("kafka").stuck_ids = {Id(2), Id(3)};
  const auto first =
      Dispatch({Ev(1, "orders.a", "k"), Ev(2, "orders.a", "k"), Ev(3, "orders.a", "k")});
  ASSERT_TRUE(Is(first[0], Outcome::kPublished));
  ASSERT_EQ(first[1].next_attempt_us, kParkedUntil);
  // A later event of the key, claimed meanwhile, waits behind them.
  const auto tail = Dispatch({Ev(4, "orders.a", "k")}, kNow + 1000);
  ASSERT_TRUE(Is(tail[0], Outcome::kPark));
  // The sink cut its call short: 2 and 3 were never sent.
  Broker("kafka").script = CutOffAfter(1);
  Broker("kafka").stuck_ids.clear();
  ASSERT_TRUE(dispatcher_.LateArrived());
  const int64_t t = kNow + 2000000;
  const auto late = SettleLate(t);
  ASSERT_EQ(late.size(), 2u);
  for (const LateOutcome &o : late) {
    EXPECT_TRUE(Is(o.outcome, Outcome::kPark));
    EXPECT_LE(o.outcome.next_attempt_us, t) << o.id << " is not due at once with its first";
    EXPECT_EQ(o.outcome.next_attempt_us, late[0].outcome.next_attempt_us);
  }
}

}  // namespace
}  // namespace outbox
