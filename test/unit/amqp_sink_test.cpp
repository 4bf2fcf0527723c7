// The AMQP sink against a real RabbitMQ node (amqp_node.hpp: one node for
// the whole run), read back with a consumer: what arrives (body,
// properties, headers, both formats), publisher confirms with many
// messages in flight, and the broker's refusals: a nack, an unroutable
// message returned, a message too large, a missing exchange, with per-key
// order kept through each.
#include "sinks/amqp_sink.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "amqp_batch.hpp"
#include "amqp_node.hpp"
#include "amqp_test_client.hpp"
#include "core/message_format.hpp"
#include "test_support.hpp"

namespace outbox {
namespace {

using namespace amqp_test;
using test_support::Clock;
using test_support::Contains;
using test_support::Opt;
using test_support::SecondsSince;

#define REQUIRE_NODE()                                              \
  const SharedNodeInfo &node = SharedRabbitNode();                  \
  ASSERT_TRUE(node.ok) << "RabbitMQ did not start: " << node.error; \
  const int port = node.ports.amqp

// A queue name of this test's own (the node is shared by concurrent tests).
std::string Name(const std::string &what) {
  return "amqp-unit-" + what + "-" + std::to_string(getpid());
}

TEST(AmqpSink, OptionsAreValidatedAtCreation) {
  std::string error;
  EXPECT_EQ(MakeAmqpSink("bad", {Opt("hostname", "x")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "unknown option \"hostname\""));
  EXPECT_EQ(MakeAmqpSink("bad", {Opt("tls_verify", "false")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "\"tls_verify\" applies only with \"tls\""));
  // Creating a sink connects to nothing: no broker listens on this port.
  std::unique_ptr<Sink> sink =
      MakeAmqpSink("ok", {Opt("port", std::to_string(FreePort()))}, &error);
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->State(), "idle");
  EXPECT_FALSE(sink->NeedsRecreate());
  EXPECT_TRUE(sink->TakeLogs().empty());
}

TEST(AmqpSink, EmptyBatchReturnsAtOnce) {
  std::unique_ptr<Sink> sink = MakeSink(FreePort());
  const Clock::time_point start = Clock::now();
  sink->Publish(nullptr, 0, nullptr, nullptr);
  EXPECT_LT(SecondsSince(start), 0.05);
  EXPECT_EQ(sink->State(), "idle");
  EXPECT_TRUE(sink->TakeLogs().empty());
}

TEST(AmqpSink, RawMessagesCarryTheContractsPropertiesAndHeaders) {
  REQUIRE_NODE();
  const std::string queue = Name("raw");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port);
  Batch batch;
  // User headers: kept under their names, but for outbox's own names (a
  // forged outbox-id), and those RabbitMQ acts on: CC/BCC in any case,
  // names starting with "x-" (lower case, as RabbitMQ reads them).
  batch.Add(queue, "order-42", R"({"id":42})",
            {{"CC", "other-queue"},
             {"bcc", "other-queue"},
             {"X-Tenant", "acme"},
             {"x-delay", "60000"},
             {"x-death", "forged"},
             {"outbox-id", "forged"},
             {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}});
  batch.Add(queue, std::nullopt, "null", {}, MessageFormat::kRaw, "orders.cancelled");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u)
      << batch.FirstOther(DeliveryStatus::kDelivered);
  EXPECT_EQ(batch.results[0].error, "");
  EXPECT_GT(batch.results[0].answered_at_us, 0);
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_TRUE(Contains(AllLogs(sink.get()),
                       "connected to 127.0.0.1:" + std::to_string(port) + " vhost \"/\""));

  const std::vector<Received> got = client.GetAll(queue);
  ASSERT_EQ(got.size(), 2u);
  const Received &m = got[0];
  EXPECT_EQ(m.body, R"({"id":42})");
  EXPECT_EQ(m.message_id, batch.Id(0));
  EXPECT_EQ(m.type, "orders.created");
  EXPECT_EQ(m.content_type, "application/json");
  EXPECT_EQ(m.app_id, "outbox");
  EXPECT_EQ(m.delivery_mode, 2);        // persistent
  EXPECT_EQ(m.timestamp, 1795255200u);  // 2026-11-21 10:00:00 UTC, in seconds
  const std::vector<std::pair<std::string, std::string>> want = {
      {"outbox-id", batch.Id(0)},
      {"outbox-topic", "orders.created"},
      {"outbox-key", "order-42"},
      {"X-Tenant", "acme"},
      {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}};
  EXPECT_EQ(m.headers, want);
  // No key: no outbox-key header.
  EXPECT_EQ(got[1].body, "null");
  EXPECT_EQ(got[1].type, "orders.cancelled");
  EXPECT_EQ(got[1].headers, (std::vector<std::pair<std::string, std::string>>{
                                {"outbox-id", batch.Id(1)}, {"outbox-topic", "orders.cancelled"}}));
}

TEST(AmqpSink, CloudEventsAreOneStructuredJsonBody) {
  REQUIRE_NODE();
  const std::string queue = Name("ce");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port);
  Batch batch;
  batch.Add(queue, "order-42", R"({"id":42})",
            {{"X-Tenant", "acme"},
             {"CC", "kept inside the event"},
             {"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
            MessageFormat::kCloudEvents);
  batch.Publish(sink.get());
  ASSERT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  const std::optional<Received> m = client.Get(queue);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->body,
            "{\"specversion\":\"1.0\",\"id\":\"" + batch.Id(0) +
                "\",\"source\":\"/outbox/unit\",\"type\":\"orders.created\","
                "\"time\":\"2026-11-21T10:00:00.123456Z\","
                "\"datacontenttype\":\"application/json\",\"partitionkey\":\"order-42\","
                "\"traceparent\":\"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\","
                "\"outboxheaders\":\"{\\\"X-Tenant\\\":\\\"acme\\\","
                "\\\"CC\\\":\\\"kept inside the event\\\"}\",\"data\":{\"id\":42}}");
  EXPECT_EQ(m->content_type, "application/cloudevents+json");
  EXPECT_EQ(m->message_id, batch.Id(0));
  EXPECT_EQ(m->type, "orders.created");
  EXPECT_EQ(m->delivery_mode, 2);
  EXPECT_EQ(m->app_id, "outbox");
  EXPECT_FALSE(m->has_headers) << "structured mode: everything is in the body";
}

// Many messages in flight: distinct keys and no key all go before the first
// confirm returns, and every one is confirmed (the broker acknowledges
// several at once with `multiple`). A hot key goes one confirm at a time,
// in order.
TEST(AmqpSink, ManyMessagesInFlightAreAllConfirmedInKeyOrder) {
  REQUIRE_NODE();
  const std::string queue = Name("many");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port);
  Batch warmup;
  warmup.Add(queue, "w", "0");
  warmup.Publish(sink.get());  // connected first: only the batches are timed
  ASSERT_EQ(warmup.results[0].status, DeliveryStatus::kDelivered) << warmup.results[0].error;
  ASSERT_TRUE(client.Purge(queue));

  constexpr int kSpread = 3000;
  Batch spread;
  for (int i = 0; i < kSpread; ++i) {
    if (i % 3 == 0) {
      spread.Add(queue, std::nullopt, std::to_string(i));
    } else {
      spread.Add(queue, "k" + std::to_string(i % 7), std::to_string(i));
    }
  }
  const Clock::time_point start = Clock::now();
  spread.Publish(sink.get());
  const double spread_seconds = SecondsSince(start);
  ASSERT_EQ(spread.Count(DeliveryStatus::kDelivered), size_t{kSpread})
      << spread.FirstOther(DeliveryStatus::kDelivered);
  const std::vector<Received> got = client.GetAll(queue);
  ASSERT_EQ(got.size(), size_t{kSpread});
  // Per key, in array order.
  std::vector<int> last(7, -1);
  for (const Received &m : got) {
    const int i = std::stoi(m.body);
    if (i % 3 == 0) continue;
    EXPECT_GT(i, last[i % 7]) << "key k" << i % 7;
    last[i % 7] = i;
  }

  // The same count of messages on one key takes a confirm per message, in
  // order. (How much slower that is than keys in flight together is printed,
  // not asserted: on a loaded machine the ratio fell to 1.5 where 2 was
  // asked; bench/sink_drain measures it side by side.)
  constexpr int kHot = 300;
  Batch hot;
  for (int i = 0; i < kHot; ++i) hot.Add(queue, "hot", std::to_string(i));
  const Clock::time_point hot_start = Clock::now();
  hot.Publish(sink.get());
  const double hot_seconds = SecondsSince(hot_start);
  ASSERT_EQ(hot.Count(DeliveryStatus::kDelivered), size_t{kHot});
  const std::vector<Received> in_order = client.GetAll(queue);
  ASSERT_EQ(in_order.size(), size_t{kHot});
  for (int i = 0; i < kHot; ++i) ASSERT_EQ(in_order[i].body, std::to_string(i));
  std::printf("[          ] %d messages over 7 keys and none: %.3f s; %d on one key: %.3f s\n",
              kSpread, spread_seconds, kHot, hot_seconds);
}

// The per-key order proof: the broker refuses exactly one message (a queue
// with x-overflow=reject-publish, full), while the same key's next messages
// wait in the sink. They are never sent behind the refused one (at the
// consumer nothing of the key follows it), other keys go on meanwhile, and
// once the queue has room the rest arrives in order.
TEST(AmqpSink, NackedMessageHoldsBackTheRestOfItsKey) {
  REQUIRE_NODE();
  const std::string full = Name("nack-full");
  const std::string other = Name("nack-other");
  Client client(port);
  ASSERT_TRUE(client.ok()) << client.error();
  ASSERT_TRUE(client.DeclareQueue(full, {{"x-max-length", "2"}, {"x-overflow", "reject-publish"}}))
      << client.error();
  ASSERT_TRUE(client.DeclareQueue(other)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port);
  Batch filler;
  filler.Add(full, std::nullopt, "\"filler\"");
  filler.Publish(sink.get());
  ASSERT_EQ(filler.results[0].status, DeliveryStatus::kDelivered) << filler.results[0].error;

  Batch batch;
  batch.Add(full, "k", "1");    // takes the last place in the queue
  batch.Add(other, "j", "10");  // another key, in flight meanwhile
  batch.Add(full, "k", "2");    // refused: the queue is full
  batch.Add(other, "j", "11");
  batch.Add(full, "k", "3");  // must never be sent behind "2"
  batch.Add(full, "k", "4");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kTargetRefused) << batch.results[2].error;
  EXPECT_TRUE(Contains(batch.results[2].error, "basic.nack"));
  EXPECT_GT(batch.results[2].answered_at_us, 0);
  for (size_t i : {4u, 5u}) {
    EXPECT_EQ(batch.results[i].status, DeliveryStatus::kNotSent) << i;
    EXPECT_TRUE(Contains(batch.results[i].error, "held back")) << i;
  }
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "connected");

  // At the consumer: the filler and "1", and nothing of k after it.
  std::vector<std::string> bodies;
  for (const Received &m : client.GetAll(full)) bodies.push_back(m.body);
  EXPECT_EQ(bodies, (std::vector<std::string>{"\"filler\"", "1"}));
  bodies.clear();
  for (const Received &m : client.GetAll(other)) bodies.push_back(m.body);
  EXPECT_EQ(bodies, (std::vector<std::string>{"10", "11"}));

  // The queue has room again: what was refused or held goes, in order.
  Batch rest;
  rest.Add(full, "k", "2").Add(full, "k", "3");
  rest.Publish(sink.get());
  ASSERT_EQ(rest.Count(DeliveryStatus::kDelivered), 2u)
      << rest.FirstOther(DeliveryStatus::kDelivered);
  bodies.clear();
  for (const Received &m : client.GetAll(full)) bodies.push_back(m.body);
  EXPECT_EQ(bodies, (std::vector<std::string>{"2", "3"}));
  Batch last;
  last.Add(full, "k", "4");
  last.Publish(sink.get());
  ASSERT_EQ(last.results[0].status, DeliveryStatus::kDelivered) << last.results[0].error;
  const std::optional<Received> four = client.Get(full);
  ASSERT_TRUE(four.has_value());
  EXPECT_EQ(four->body, "4");
}

TEST(AmqpSink, UnroutableMessageIsItsTargetsRefusal) {
  REQUIRE_NODE();
  const std::string queue = Name("routable");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port);
  const std::string nowhere = Name("no-such-queue");
  Batch batch;
  batch.Add(nowhere, "k", "1");  // the default exchange routes to a queue of that name: none
  batch.Add(queue, "k2", "2");
  batch.Add(nowhere, "k", "3");
  batch.Add(queue, std::nullopt, "4");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kTargetRefused) << batch.results[0].error;
  EXPECT_TRUE(Contains(batch.results[0].error, "NO_ROUTE (312)"));
  EXPECT_TRUE(Contains(batch.results[0].error, "routing key \"" + nowhere + "\""));
  EXPECT_GT(batch.results[0].answered_at_us, 0);
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kNotSent) << batch.results[2].error;
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "connected") << "a refused target says nothing of the sink";
  EXPECT_EQ(client.Count(queue), 2);

  // Through an exchange: bound keys are delivered, others come back.
  const std::string exchange = Name("direct");
  ASSERT_TRUE(client.DeclareExchange(exchange, "direct") && client.Bind(queue, exchange, "bound"))
      << client.error();
  std::unique_ptr<Sink> via = MakeSink(port, {Opt("exchange", exchange)});
  Batch routed;
  routed.Add("bound", "k", "5").Add("unbound", "k", "6");
  routed.Publish(via.get());
  EXPECT_EQ(routed.results[0].status, DeliveryStatus::kDelivered) << routed.results[0].error;
  EXPECT_EQ(routed.results[1].status, DeliveryStatus::kTargetRefused);
  EXPECT_TRUE(Contains(routed.results[1].error, "exchange \"" + exchange + "\""));
  EXPECT_EQ(client.Count(queue), 3);
  ASSERT_TRUE(client.DeleteExchange(exchange));
}

// A message over the broker's max_message_size (1 MiB on the shared node)
// closes the channel: that message is rejected, the others on the channel
// were only lost with it (retriable), publishing goes on on a new channel,
// and from then on a message that large is refused without being sent.
TEST(AmqpSink, TooLargeMessageIsRejectedAloneAndNotSentAgain) {
  REQUIRE_NODE();
  const std::string queue = Name("large");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port);
  const std::string big = "\"" + std::string(1536 * 1024, 'x') + "\"";
  Batch batch;
  batch.Add(queue, "a", "1");
  batch.Add(queue, "b", big);
  batch.Add(queue, "b", "3");  // behind the big one
  for (int i = 0; i < 20; ++i) batch.Add(queue, "c" + std::to_string(i), std::to_string(10 + i));
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kRejected) << batch.results[1].error;
  EXPECT_TRUE(Contains(batch.results[1].error,
                       "message size 1572866 is larger than configured max size 1048576"));
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kNotSent);
  for (size_t i = 0; i < batch.results.size(); ++i) {
    if (i == 1 || i == 2) continue;
    const DeliveryStatus s = batch.results[i].status;
    EXPECT_TRUE(s == DeliveryStatus::kDelivered || s == DeliveryStatus::kRetriable)
        << i << ": " << batch.results[i].error;
  }
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "larger messages are refused without sending them"));
  // Every confirmed message is stored; a message lost with the channel may
  // have been stored before its confirm could come (at least once).
  const long stored = client.Count(queue);
  EXPECT_GE(static_cast<size_t>(stored), batch.Count(DeliveryStatus::kDelivered));
  EXPECT_LE(static_cast<size_t>(stored),
            batch.Count(DeliveryStatus::kDelivered) + batch.Count(DeliveryStatus::kRetriable));

  // Again: refused at once, and its neighbours are not disturbed.
  Batch again;
  again.Add(queue, "b", big).Add(queue, "d", "4").Add(queue, std::nullopt, "5");
  again.Publish(sink.get());
  EXPECT_EQ(again.results[0].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(again.results[0].error, "larger than the broker's max 1048576"));
  EXPECT_EQ(again.results[0].answered_at_us, 0) << "refused here, not by the broker";
  EXPECT_EQ(again.Count(DeliveryStatus::kDelivered), 2u)
      << again.FirstOther(DeliveryStatus::kDelivered);
  EXPECT_EQ(client.Count(queue), stored + 2);
}

// A missing exchange concerns every message of the sink: nothing is the
// events' fault (retriable, the sink down), the connection stays, and
// publishing resumes once the exchange exists.
TEST(AmqpSink, MissingExchangeIsTheSinksFaultUntilItExists) {
  REQUIRE_NODE();
  const std::string queue = Name("exq");
  const std::string exchange = Name("late-exchange");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port, {Opt("exchange", exchange)});
  Batch batch;
  batch.Add("key", "k", "1").Add("key", "k", "2").Add("key", std::nullopt, "3");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable) << batch.results[0].error;
  EXPECT_TRUE(Contains(batch.results[0].error, "NOT_FOUND (404)"));
  EXPECT_TRUE(Contains(batch.results[0].error, "exchange \"" + exchange + "\""));
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(sink->State(), "down");
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "NOT_FOUND"));

  ASSERT_TRUE(client.DeclareExchange(exchange, "direct") && client.Bind(queue, exchange, "key"))
      << client.error();
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u)
      << batch.FirstOther(DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_EQ(client.Count(queue), 3);
  // The same connection: no second "connected to" line.
  EXPECT_FALSE(Contains(AllLogs(sink.get()), "connected to"));
  ASSERT_TRUE(client.DeleteExchange(exchange));
}

TEST(AmqpSink, FormatsOtherThanRawAndCloudEventsAreRejected) {
  REQUIRE_NODE();
  const std::string queue = Name("formats");
  Client client(port);
  ASSERT_TRUE(client.ok() && client.DeclareQueue(queue)) << client.error();
  std::unique_ptr<Sink> sink = MakeSink(port);
  Batch batch;
  batch.Add(queue, "k", "1", {}, MessageFormat::kDebezium);  // a restored route
  batch.Add(queue, "k", "2");
  batch.Add(queue, "j", "3");
  batch.Add(std::string(256, 'r'), "k2", "4");  // a routing key AMQP cannot carry
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(batch.results[0].error, "format debezium cannot be sent"));
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kTargetRefused);
  EXPECT_TRUE(Contains(batch.results[3].error, "at most 255 bytes"));
  EXPECT_EQ(client.Count(queue), 1);
}

}  // namespace
}  // namespace outbox
