// The Kafka sink against librdkafka's in-process mock cluster: what arrives
// at the broker, how outcomes are classified, and that Publish stays bounded
// when brokers fail.
#include "sinks/kafka_sink.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

constexpr int16_t kProduceApi = 0;  // request codes are not in the public header

void Quiet(const rd_kafka_t *, int, const char *, const char *) {}

// Destroying a mock cluster takes up to a second (its thread wakes once a
// second): clusters are destroyed on threads of their own, joined at the end.
class Reaper : public ::testing::Environment {
 public:
  static void Add(std::thread thread) {
    std::lock_guard<std::mutex> lock(mutex_);
    threads_.push_back(std::move(thread));
  }
  void TearDown() override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::thread &t : threads_) t.join();
    threads_.clear();
  }

 private:
  static inline std::mutex mutex_;
  static inline std::vector<std::thread> threads_;
};
::testing::Environment *const reaper = ::testing::AddGlobalTestEnvironment(new Reaper);

// An in-process Kafka cluster, owned by a helper handle of its own.
class MockCluster {
 public:
  explicit MockCluster(int brokers = 3) : brokers_(brokers) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, Quiet);
    char errstr[256];
    helper_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cluster_ = rd_kafka_mock_cluster_new(helper_, brokers);
  }
  ~MockCluster() {
    Reaper::Add(std::thread([cluster = cluster_, helper = helper_] {
      rd_kafka_mock_cluster_destroy(cluster);
      rd_kafka_destroy(helper);
    }));
  }
  MockCluster(const MockCluster &) = delete;
  MockCluster &operator=(const MockCluster &) = delete;

  rd_kafka_mock_cluster_t *get() const { return cluster_; }
  std::string Bootstraps() const { return rd_kafka_mock_cluster_bootstraps(cluster_); }
  void CreateTopic(const std::string &topic, int partitions) {
    ASSERT_EQ(rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, brokers_),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }
  void SetAllBrokers(bool up) {
    for (int32_t id = 1; id <= brokers_; ++id) {
      if (up) {
        rd_kafka_mock_broker_set_up(cluster_, id);
      } else {
        rd_kafka_mock_broker_set_down(cluster_, id);
      }
    }
  }
  void SetRtt(int ms) {
    for (int32_t id = 1; id <= brokers_; ++id) rd_kafka_mock_broker_set_rtt(cluster_, id, ms);
  }
  void SetRtt(int32_t broker, int ms) { rd_kafka_mock_broker_set_rtt(cluster_, broker, ms); }
  void SetLeader(const std::string &topic, int32_t partition, int32_t broker) {
    ASSERT_EQ(rd_kafka_mock_partition_set_leader(cluster_, topic.c_str(), partition, broker),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }

 private:
  int brokers_;
  rd_kafka_t *helper_ = nullptr;
  rd_kafka_mock_cluster_t *cluster_ = nullptr;
};

struct Received {
  int32_t partition = -1;
  std::optional<std::string> key;  // nullopt: no key
  std::string value;
  std::vector<std::pair<std::string, std::optional<std::string>>> headers;
};

// Reads `topic` from the beginning until `expected` messages arrived (or
// timeout_ms passed), then keeps reading for linger_ms to catch extras.
std::vector<Received> Consume(const MockCluster &cluster, const std::string &topic, int partitions,
                              size_t expected, int timeout_ms = 10000, int linger_ms = 0) {
  char errstr[256];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", cluster.Bootstraps().c_str(), errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "group.id", "kafka-sink-test", errstr, sizeof errstr);
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr);
  rd_kafka_conf_set_log_cb(conf, Quiet);
  rd_kafka_t *consumer = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
  EXPECT_NE(consumer, nullptr) << errstr;
  std::vector<Received> received;
  if (consumer == nullptr) return received;
  rd_kafka_poll_set_consumer(consumer);
  rd_kafka_topic_partition_list_t *assignment = rd_kafka_topic_partition_list_new(partitions);
  for (int p = 0; p < partitions; ++p) {
    rd_kafka_topic_partition_list_add(assignment, topic.c_str(), p)->offset =
        RD_KAFKA_OFFSET_BEGINNING;
  }
  rd_kafka_assign(consumer, assignment);
  rd_kafka_topic_partition_list_destroy(assignment);

  const Clock::time_point start = Clock::now();
  std::optional<Clock::time_point> complete_at;
  while (SecondsSince(start) * 1000 < timeout_ms) {
    if (received.size() >= expected) {
      if (!complete_at) complete_at = Clock::now();
      if (SecondsSince(*complete_at) * 1000 >= linger_ms) break;
    }
    rd_kafka_message_t *message = rd_kafka_consumer_poll(consumer, 50);
    if (message == nullptr) continue;
    if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      Received r;
      r.partition = message->partition;
      if (message->key != nullptr) {
        r.key = std::string(static_cast<const char *>(message->key), message->key_len);
      }
      if (message->payload != nullptr) {
        r.value = std::string(static_cast<const char *>(message->payload), message->len);
      }
      rd_kafka_headers_t *headers = nullptr;
      if (rd_kafka_message_headers(message, &headers) == RD_KAFKA_RESP_ERR_NO_ERROR) {
        const char *name;
        const void *value;
        size_t size;
        for (size_t i = 0; rd_kafka_header_get_all(headers, i, &name, &value, &size) ==
                           RD_KAFKA_RESP_ERR_NO_ERROR;
             ++i) {
          std::optional<std::string> v;
          if (value != nullptr) v = std::string(static_cast<const char *>(value), size);
          r.headers.emplace_back(name, v);
        }
      }
      received.push_back(std::move(r));
    }
    rd_kafka_message_destroy(message);
  }
  rd_kafka_consumer_close(consumer);
  rd_kafka_destroy(consumer);
  return received;
}

// Messages whose views point into strings the test keeps.
struct Batch {
  struct Owned {
    std::string id, topic, target, key, payload;
    bool has_key = false;
    std::vector<std::pair<std::string, std::string>> headers;
  };
  std::vector<std::unique_ptr<Owned>> owned;
  std::vector<std::vector<Header>> header_views;
  std::vector<OutMessage> messages;
  std::vector<Delivery> results;
  uint64_t ticket = 0;  // SendTo's

  Batch &Add(std::string target, std::optional<std::string> key, std::string payload,
             std::vector<std::pair<std::string, std::string>> headers = {},
             std::string topic = "") {
    auto o = std::make_unique<Owned>();
    o->id = "0190f5f0-0000-7000-8000-" + std::to_string(100000000000 + owned.size());
    o->topic = topic.empty() ? target : topic;
    o->target = std::move(target);
    o->has_key = key.has_value();
    if (key) o->key = *key;
    o->payload = std::move(payload);
    o->headers = std::move(headers);
    owned.push_back(std::move(o));
    return *this;
  }

  // Builds the views (after all Add calls) and publishes.
  const std::vector<Delivery> &PublishTo(Sink &sink, Sink::InterruptCheck interrupted = nullptr) {
    Build();
    sink.Publish(messages.data(), messages.size(), results.data(), interrupted);
    return results;
  }

  // The pipelined halves: Send returns before the outcomes are in.
  void SendTo(Sink &sink) {
    Build();
    ticket = sink.Send(messages.data(), messages.size(), results.data(), nullptr);
  }
  const std::vector<Delivery> &CollectFrom(Sink &sink, Sink::InterruptCheck interrupted = nullptr) {
    sink.Collect(ticket, interrupted);
    return results;
  }

 private:
  void Build() {
    header_views.clear();
    messages.clear();
    header_views.reserve(owned.size());
    for (const auto &o : owned) {
      std::vector<Header> hs;
      for (const auto &h : o->headers) hs.push_back(Header{h.first, h.second});
      header_views.push_back(std::move(hs));
      OutMessage m;
      m.id = o->id;
      m.topic = o->topic;
      m.target = o->target;
      m.has_key = o->has_key;
      if (o->has_key) m.key = o->key;  // an empty std::string gives a non-null view
      m.payload = o->payload;
      m.headers = header_views.back().data();
      m.header_count = header_views.back().size();
      m.headers_json = "{}";
      messages.push_back(m);
    }
    results.assign(messages.size(), Delivery{DeliveryStatus::kRejected, "not filled"});
  }
};

std::unique_ptr<Sink> MakeSink(const MockCluster &cluster, SinkOptions extra = {}) {
  SinkOptions options{Opt("bootstrap.servers", cluster.Bootstraps())};
  for (auto &o : extra) options.push_back(std::move(o));
  std::string error;
  // As a superuser's sink: these tests are about delivery (one sets debug).
  std::unique_ptr<Sink> sink = MakeKafkaSink("test", options, &error, true);
  EXPECT_NE(sink, nullptr) << error;
  return sink;
}

void ExpectAll(const std::vector<Delivery> &results, DeliveryStatus status,
               const std::string &error_part = "") {
  for (size_t i = 0; i < results.size(); ++i) {
    EXPECT_EQ(results[i].status, status) << "message " << i << ": " << results[i].error;
    if (status == DeliveryStatus::kDelivered) {
      EXPECT_EQ(results[i].error, "") << "message " << i;
    } else {
      EXPECT_TRUE(Contains(results[i].error, error_part)) << "message " << i;
    }
  }
}

// One message delivered before the test proper: the producer has connected
// and fetched the topic's metadata, so what follows measures the case at hand.
void WarmUp(Sink &sink, const std::string &topic, std::optional<std::string> key,
            const std::string &value) {
  Batch warmup;
  warmup.Add(topic, std::move(key), value);
  ExpectAll(warmup.PublishTo(sink), DeliveryStatus::kDelivered);
}

// Messages whose values are increasing numbers per key: each of `keys` keys
// arrived in that order, all on one partition.
void ExpectEachKeyInOrder(const std::vector<Received> &got, size_t keys) {
  std::map<std::string, int> last;
  std::map<std::string, int32_t> partition_of;
  for (const Received &r : got) {
    ASSERT_TRUE(r.key.has_value());
    const int seq = std::stoi(r.value);
    auto it = last.find(*r.key);
    if (it != last.end()) {
      EXPECT_LT(it->second, seq) << "key " << *r.key;
    }
    last[*r.key] = seq;
    auto p = partition_of.emplace(*r.key, r.partition);
    EXPECT_EQ(p.first->second, r.partition) << "key " << *r.key << " changed partition";
  }
  EXPECT_EQ(last.size(), keys);
}

bool HasLine(const std::vector<LogLine> &lines, const std::string &needle) {
  for (const LogLine &line : lines) {
    if (line.text.find(needle) != std::string::npos) return true;
  }
  return false;
}

// Java's murmur2 (org.apache.kafka.common.utils.Utils.murmur2).
int32_t Murmur2(const std::string &data) {
  const uint32_t m = 0x5bd1e995;
  const int r = 24;
  const auto length = static_cast<uint32_t>(data.size());
  uint32_t h = 0x9747b28c ^ length;
  const auto *bytes = reinterpret_cast<const unsigned char *>(data.data());
  for (uint32_t i = 0; i + 4 <= length; i += 4) {
    uint32_t k = bytes[i] | (bytes[i + 1] << 8) | (bytes[i + 2] << 16) |
                 (static_cast<uint32_t>(bytes[i + 3]) << 24);
    k *= m;
    k ^= k >> r;
    k *= m;
    h *= m;
    h ^= k;
  }
  const uint32_t tail = length & ~3u;
  switch (length % 4) {
    case 3:
      h ^= static_cast<uint32_t>(bytes[tail + 2]) << 16;
      [[fallthrough]];
    case 2:
      h ^= static_cast<uint32_t>(bytes[tail + 1]) << 8;
      [[fallthrough]];
    case 1:
      h ^= bytes[tail];
      h *= m;
  }
  h ^= h >> 13;
  h *= m;
  h ^= h >> 15;
  return static_cast<int32_t>(h);
}

// The CRC-32 of zlib, which librdkafka's "consistent" partitioner uses.
uint32_t Crc32(const std::string &data) {
  uint32_t crc = 0xffffffffu;
  for (const char c : data) {
    crc ^= static_cast<unsigned char>(c);
    for (int b = 0; b < 8; ++b) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
  }
  return ~crc;
}

// ------------------------------------------------------------ what arrives

TEST(KafkaSink, DeliversKeyValueAndHeadersInContractFormat) {
  MockCluster cluster;
  cluster.CreateTopic("orders", 3);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  Batch batch;
  batch.Add("orders", std::string("customer-42"), R"({"total":12.5,"items":["a"]})",
            {{"trace", "abc"}, {"z-first", "1"}, {"a-second", ""}, {"trace", "again"}},
            "order.created");
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);

  const auto got = Consume(cluster, "orders", 3, 1, 10000, 300);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].key, std::optional<std::string>("customer-42"));
  EXPECT_EQ(got[0].value, R"({"total":12.5,"items":["a"]})");
  using H = std::pair<std::string, std::optional<std::string>>;
  const std::vector<H> expected{
      {"outbox-id", batch.owned[0]->id},
      {"outbox-topic", "order.created"},
      {"trace", "abc"},
      {"z-first", "1"},
      {"a-second", ""},
      {"trace", "again"},
  };
  EXPECT_EQ(got[0].headers, expected);
}

TEST(KafkaSink, NullKeyProducesMessageWithoutKeyAndEmptyKeyAZeroLengthKey) {
  MockCluster cluster;
  cluster.CreateTopic("keys", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  Batch batch;
  batch.Add("keys", std::nullopt, R"({"n":0})").Add("keys", std::string(), R"({"n":1})");
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);

  const auto got = Consume(cluster, "keys", 1, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].value, R"({"n":0})");
  EXPECT_EQ(got[0].key, std::nullopt);
  EXPECT_EQ(got[1].value, R"({"n":1})");
  EXPECT_EQ(got[1].key, std::optional<std::string>(""));
}

TEST(KafkaSink, SameKeyKeepsOrderAcrossManyMessages) {
  MockCluster cluster;
  cluster.CreateTopic("ordered", 3);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  constexpr int kMessages = 2000;
  constexpr int kKeys = 20;
  constexpr int kPerPublish = 500;
  for (int first = 0; first < kMessages; first += kPerPublish) {
    Batch batch;
    for (int i = first; i < first + kPerPublish; ++i) {
      batch.Add("ordered", "key-" + std::to_string(i % kKeys), std::to_string(i));
    }
    ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);
  }

  const auto got = Consume(cluster, "ordered", 3, kMessages, 15000, 200);
  ASSERT_EQ(got.size(), static_cast<size_t>(kMessages));
  ExpectEachKeyInOrder(got, kKeys);
}

TEST(KafkaSink, BatchesInFlightTogetherKeepKeyOrderAndGetTheirOwnOutcomes) {
  MockCluster cluster;
  cluster.CreateTopic("pipelined", 3);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "pipelined", std::string("key-0"), "-1");
  cluster.SetRtt(20);  // the batches are at the brokers together
  constexpr int kBatches = 4;
  constexpr int kPerBatch = 300;
  constexpr int kKeys = 10;
  std::vector<Batch> batches(kBatches);
  for (int b = 0; b < kBatches; ++b) {
    for (int i = b * kPerBatch; i < (b + 1) * kPerBatch; ++i) {
      batches[b].Add("pipelined", "key-" + std::to_string(i % kKeys), std::to_string(i));
    }
    batches[b].SendTo(*sink);
  }
  for (Batch &batch : batches) ExpectAll(batch.CollectFrom(*sink), DeliveryStatus::kDelivered);
  cluster.SetRtt(0);

  const auto got = Consume(cluster, "pipelined", 3, kBatches * kPerBatch + 1, 15000, 200);
  ASSERT_EQ(got.size(), static_cast<size_t>(kBatches * kPerBatch + 1));
  ExpectEachKeyInOrder(got, kKeys);
}

TEST(KafkaSink, InterruptWhileBatchesAreInFlightEndsThemAll) {
  MockCluster cluster;
  cluster.CreateTopic("stalled", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "stalled", std::string("k"), "w");
  cluster.SetRtt(1500);
  Batch first, second;
  for (int i = 0; i < 5; ++i) first.Add("stalled", std::string("k"), "a" + std::to_string(i));
  for (int i = 0; i < 5; ++i) second.Add("stalled", std::string("k"), "b" + std::to_string(i));
  first.SendTo(*sink);
  second.SendTo(*sink);
  const Clock::time_point start = Clock::now();
  ExpectAll(first.CollectFrom(*sink, [] { return true; }), DeliveryStatus::kRetriable,
            "interrupted");
  // The purge took the later batch too: it has its outcomes at once.
  ExpectAll(second.CollectFrom(*sink), DeliveryStatus::kRetriable, "interrupted");
  EXPECT_LT(SecondsSince(start), 1.4);
  cluster.SetRtt(0);
  Batch next;
  next.Add("stalled", std::string("k"), "c");
  ExpectAll(next.PublishTo(*sink), DeliveryStatus::kDelivered);
}

// The publisher abandons its batches when its transaction fails: their
// outcome arrays are about to be freed, so after AbandonAll no report may
// reach them, and an old ticket must not match a new batch.
TEST(KafkaSink, AbandonAllSettlesOpenBatchesAndForgetsThem) {
  MockCluster cluster;
  cluster.CreateTopic("abandoned", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "abandoned", std::string("k"), "w");
  cluster.SetRtt(500);
  Batch first, second;
  for (int i = 0; i < 5; ++i) first.Add("abandoned", std::string("k"), "a" + std::to_string(i));
  for (int i = 0; i < 5; ++i) second.Add("abandoned", std::string("j"), "b" + std::to_string(i));
  first.SendTo(*sink);
  second.SendTo(*sink);
  const uint64_t stale = first.ticket;
  sink->AbandonAll("abandoned: test");
  ExpectAll(first.results, DeliveryStatus::kRetriable, "abandoned: test");
  ExpectAll(second.results, DeliveryStatus::kRetriable, "abandoned: test");
  cluster.SetRtt(0);
  // The same outcome array, reused for the next batch.
  first.results.assign(first.results.size(), Delivery{DeliveryStatus::kRejected, "not filled"});
  sink->Collect(stale, nullptr);  // matches nothing: leaves the array alone
  ExpectAll(first.results, DeliveryStatus::kRejected, "not filled");
  first.SendTo(*sink);
  EXPECT_NE(first.ticket, stale);
  ExpectAll(first.CollectFrom(*sink), DeliveryStatus::kDelivered);
}

TEST(KafkaSink, KeysLandOnTheJavaClientsPartition) {
  // Kafka's own test vectors for murmur2 (UtilsTest.testMurmur2).
  EXPECT_EQ(Murmur2("21"), -973932308);
  EXPECT_EQ(Murmur2("foobar"), -790332482);
  EXPECT_EQ(Murmur2("a-little-bit-long-string"), -985981536);
  EXPECT_EQ(Murmur2("a-little-bit-longer-string"), -1486304829);
  EXPECT_EQ(Murmur2("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
  EXPECT_EQ(Murmur2("abc"), 479470107);

  MockCluster cluster;
  cluster.CreateTopic("placed", 7);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  Batch batch;
  for (int i = 0; i < 40; ++i) batch.Add("placed", "customer-" + std::to_string(i), "{}");
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);
  const auto got = Consume(cluster, "placed", 7, 40);
  ASSERT_EQ(got.size(), 40u);
  for (const Received &r : got) {
    EXPECT_EQ(r.partition, (Murmur2(*r.key) & 0x7fffffff) % 7) << *r.key;
  }
}

// ------------------------------------------------------------ configuration

TEST(KafkaSink, UserOptionsOverrideDefaults) {
  MockCluster cluster;
  cluster.CreateTopic("placed", 7);
  std::string error;
  // Our enable.idempotence=true is in force: it refuses the user's acks=1...
  EXPECT_EQ(MakeKafkaSink("s", {Opt("bootstrap.servers", cluster.Bootstraps()), Opt("acks", "1")},
                          &error),
            nullptr);
  EXPECT_TRUE(Contains(error, "idempotence"));
  // ...until the user turns it off too.
  auto sink = MakeSink(cluster, {Opt("acks", "1"), Opt("enable.idempotence", "false"),
                                 Opt("partitioner", "consistent")});
  ASSERT_NE(sink, nullptr);
  Batch batch;
  for (int i = 0; i < 40; ++i) batch.Add("placed", "customer-" + std::to_string(i), "{}");
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);
  // The user's partitioner, not our murmur2_random, placed the keys.
  const auto got = Consume(cluster, "placed", 7, 40);
  ASSERT_EQ(got.size(), 40u);
  int differs_from_murmur2 = 0;
  for (const Received &r : got) {
    EXPECT_EQ(r.partition, static_cast<int32_t>(Crc32(*r.key) % 7)) << *r.key;
    if (r.partition != (Murmur2(*r.key) & 0x7fffffff) % 7) ++differs_from_murmur2;
  }
  EXPECT_GT(differs_from_murmur2, 0);
}

TEST(KafkaSink, InvalidConfigurationReturnsError) {
  const SinkOption bootstrap = Opt("bootstrap.servers", "127.0.0.1:9");
  std::string error;
  EXPECT_EQ(MakeKafkaSink("s", {bootstrap, Opt("no.such.property", "1")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "no.such.property"));
  EXPECT_EQ(MakeKafkaSink("s", {bootstrap, Opt("linger.ms", "soon")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "linger.ms"));
  EXPECT_EQ(MakeKafkaSink("s", {Opt("acks", "all")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "bootstrap.servers"));
  EXPECT_EQ(
      MakeKafkaSink("s", {bootstrap, SinkOption{"acks", SinkOption::Kind::kNumber, "1"}}, &error),
      nullptr);
  EXPECT_TRUE(Contains(error, "acks"));
  // Refused by rd_kafka_new rather than rd_kafka_conf_set.
  EXPECT_EQ(
      MakeKafkaSink("s", {bootstrap, Opt("max.in.flight.requests.per.connection", "50")}, &error),
      nullptr);
  EXPECT_TRUE(Contains(error, "max.in.flight")) << error;
  // A null error pointer is allowed.
  EXPECT_EQ(MakeKafkaSink("s", {Opt("no.such.property", "1")}, nullptr), nullptr);
}

TEST(KafkaSink, FlushSkipsLingerSoPublishDoesNotWaitForIt) {
  MockCluster cluster;
  cluster.CreateTopic("quick", 1);
  auto sink = MakeSink(cluster, {Opt("linger.ms", "3000")});
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "quick", std::nullopt, "{}");
  Batch batch;
  batch.Add("quick", std::string("k"), "{}");
  const Clock::time_point start = Clock::now();
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);
  EXPECT_LT(SecondsSince(start), 1.0);
}

// ------------------------------------------------------------ failures

TEST(KafkaSink, AllBrokersDownGivesRetriableWithinTimeout) {
  MockCluster cluster;
  cluster.CreateTopic("events", 3);
  auto sink = MakeSink(cluster,
                       {Opt("message.timeout.ms", "1500"), Opt("reconnect.backoff.max.ms", "200")});
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->State(), "connecting");
  Batch first;
  first.Add("events", std::string("k"), "{}");
  ExpectAll(first.PublishTo(*sink), DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "connected");

  cluster.SetAllBrokers(false);
  Batch down;
  for (int i = 0; i < 5; ++i) down.Add("events", "k" + std::to_string(i), "{}");
  const Clock::time_point start = Clock::now();
  ExpectAll(down.PublishTo(*sink), DeliveryStatus::kRetriable, "_MSG_TIMED_OUT");
  const double elapsed = SecondsSince(start);
  EXPECT_GT(elapsed, 1.0);
  EXPECT_LT(elapsed, 1.5 + 5.0);
  for (int i = 0; i < 20 && sink->State() != "down"; ++i) {
    sink->Poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(sink->State(), "down");
  EXPECT_TRUE(HasLine(sink->TakeLogs(), "_ALL_BROKERS_DOWN"));

  cluster.SetAllBrokers(true);
  Batch again;
  for (int i = 0; i < 5; ++i) again.Add("events", "k" + std::to_string(i), "{}");
  std::vector<Delivery> results = again.PublishTo(*sink);
  // The first attempt may still meet a reconnecting client: retry once.
  if (results[0].status != DeliveryStatus::kDelivered) results = again.PublishTo(*sink);
  ExpectAll(results, DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_FALSE(sink->NeedsRecreate());
}

TEST(KafkaSink, ProduceErrorRetriableIsRetriedByLibrdkafka) {
  MockCluster cluster;
  cluster.CreateTopic("flaky", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "flaky", std::string("k"), "0");

  rd_kafka_mock_push_request_errors(
      cluster.get(), kProduceApi, 3, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
      RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT);
  Batch batch;
  for (int i = 1; i <= 10; ++i) batch.Add("flaky", std::string("k"), std::to_string(i));
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);
  EXPECT_FALSE(sink->NeedsRecreate());

  const auto got = Consume(cluster, "flaky", 1, 11, 10000, 300);
  ASSERT_EQ(got.size(), 11u);  // refused requests were not written: no duplicates
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].value, std::to_string(i));
}

// A message refused on the spot fails alone; a later message of its key is
// held back (kNotSent, not an attempt) so it cannot overtake it.
TEST(KafkaSink, MessageTooLargeIsRejectedAloneAndHoldsBackItsKey) {
  MockCluster cluster;
  cluster.CreateTopic("big", 1);
  auto sink = MakeSink(cluster, {Opt("message.max.bytes", "2000")});
  ASSERT_NE(sink, nullptr);
  Batch batch;
  batch.Add("big", std::string("a"), "{}")
      .Add("big", std::string("b"), "\"" + std::string(5000, 'x') + "\"")
      .Add("big", std::string("b"), "{}")
      .Add("big", std::nullopt, "{}");
  const auto &results = batch.PublishTo(*sink);
  EXPECT_EQ(results[0].status, DeliveryStatus::kDelivered);
  // Refused by librdkafka before it was queued, so only this one fails.
  EXPECT_EQ(results[1].status, DeliveryStatus::kRejected);
  EXPECT_EQ(results[1].error, "MSG_SIZE_TOO_LARGE: Broker: Message size too large");
  EXPECT_EQ(results[2].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(results[3].status, DeliveryStatus::kDelivered);
}

TEST(KafkaSink, BrokerRejectionIsReportedAndTheProducerRecovers) {
  MockCluster cluster;
  cluster.CreateTopic("refused", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "refused", std::string("k"), "0");

  rd_kafka_mock_push_request_errors(cluster.get(), kProduceApi, 1,
                                    RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  Batch rejected;
  rejected.Add("refused", std::string("k"), "1");
  ExpectAll(rejected.PublishTo(*sink), DeliveryStatus::kRejected,
            "MSG_SIZE_TOO_LARGE: Broker: Message size too large");

  Batch after;
  after.Add("refused", std::string("k"), "2");
  ExpectAll(after.PublishTo(*sink), DeliveryStatus::kDelivered);
  EXPECT_FALSE(sink->NeedsRecreate());
  const auto got = Consume(cluster, "refused", 1, 2, 10000, 300);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].value, "0");
  EXPECT_EQ(got[1].value, "2");
}

TEST(KafkaSink, InvalidTargetIsRejectedAlone) {
  MockCluster cluster;
  cluster.CreateTopic("good", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  Batch batch;
  batch.Add("bad topic!", std::string("k"), "{}").Add("good", std::string("j"), "{}");
  batch.Add("good", std::string("k"), "{}");  // its key's refused message holds it back
  const auto &results = batch.PublishTo(*sink);
  EXPECT_EQ(results[0].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(results[0].error, "_INVALID_ARG"));
  EXPECT_TRUE(Contains(results[0].error, "not a valid Kafka topic name"));
  EXPECT_EQ(results[1].status, DeliveryStatus::kDelivered) << results[1].error;
  EXPECT_EQ(results[2].status, DeliveryStatus::kNotSent) << results[2].error;
}

TEST(KafkaSink, UnknownTopicIsRefusedOnceTheBrokerSaysSo) {
  // librdkafka holds a message for a topic the cluster lacks until
  // message.timeout.ms and reports a timeout, as it would with brokers down;
  // the sink asks the cluster, which says the topic is unknown: the event's
  // fault (an attempt), not the sink's (not down).
  MockCluster cluster;
  rd_kafka_mock_topic_set_error(cluster.get(), "missing", RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART);
  auto sink = MakeSink(cluster, {Opt("message.timeout.ms", "1500")});
  ASSERT_NE(sink, nullptr);
  Batch batch;
  batch.Add("missing", std::string("k"), "{}");
  const Clock::time_point start = Clock::now();
  const auto &results = batch.PublishTo(*sink);
  EXPECT_EQ(results[0].status, DeliveryStatus::kTargetRefused) << results[0].error;
  EXPECT_TRUE(Contains(results[0].error, "UNKNOWN_TOPIC_OR_PART")) << results[0].error;
  EXPECT_TRUE(Contains(results[0].error, "\"missing\"")) << results[0].error;
  EXPECT_LT(SecondsSince(start), 1.5 + 5.0);
}

TEST(KafkaSink, APartitionWithoutALeaderIsItsTopicsTroubleNotTheSinks) {
  // librdkafka holds a message for a partition without a leader until
  // message.timeout.ms and reports a timeout, as it would with brokers down;
  // the sink asks the cluster, which answers (it is up) that the partition
  // has no leader: the topic's trouble (no attempt, the sink not down), so
  // that the sink's other topics go on.
  MockCluster cluster;
  cluster.CreateTopic("lone", 1);
  cluster.CreateTopic("events", 1);
  auto sink = MakeSink(cluster, {Opt("message.timeout.ms", "1500")});
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "lone", std::string("k"), "{}");
  cluster.SetLeader("lone", 0, -1);
  Batch batch;
  batch.Add("lone", std::string("k"), "{}");
  batch.Add("events", std::string("k2"), "{}");
  const auto &results = batch.PublishTo(*sink);
  EXPECT_EQ(results[0].status, DeliveryStatus::kTargetDown) << results[0].error;
  EXPECT_TRUE(Contains(results[0].error, "partition 0 of topic \"lone\" has no leader"))
      << results[0].error;
  EXPECT_EQ(results[1].status, DeliveryStatus::kDelivered) << results[1].error;
}

TEST(KafkaSink, TimeoutsWithBrokersDownStayRetriable) {
  MockCluster cluster;
  cluster.CreateTopic("events", 1);
  auto sink = MakeSink(cluster, {Opt("message.timeout.ms", "1000")});
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "events", std::string("k"), "{}");
  cluster.SetAllBrokers(false);
  Batch batch;
  batch.Add("events", std::string("k"), "{}");
  const auto &results = batch.PublishTo(*sink);
  EXPECT_EQ(results[0].status, DeliveryStatus::kRetriable) << results[0].error;
  // librdkafka's own timeout, or on a loaded machine (ASan, a busy CI) the
  // sink's deadline a little after it: either way a timeout, retriable.
  EXPECT_TRUE(Contains(results[0].error, "_MSG_TIMED_OUT") ||
              Contains(results[0].error, "no delivery report within"))
      << results[0].error;
  cluster.SetAllBrokers(true);
}

TEST(KafkaSink, CollectForLeavesASlowSendOpenAndFinishesItLater) {
  MockCluster cluster;
  cluster.CreateTopic("slow", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "slow", std::string("k"), "w");
  cluster.SetRtt(600);
  Batch batch;
  batch.Add("slow", std::string("k"), "a");
  batch.SendTo(*sink);
  const Clock::time_point start = Clock::now();
  EXPECT_FALSE(sink->CollectFor(batch.ticket, 50, nullptr));
  EXPECT_LT(SecondsSince(start), 0.4);
  // Still open: the answer lands in the same array when it comes, found by
  // looks that do not wait (the idle publisher's).
  bool done = false;
  while (!done && SecondsSince(start) < 10) {
    done = sink->CollectFor(batch.ticket, 0, nullptr);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(done);
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  EXPECT_GE(SecondsSince(start), 0.5);
  EXPECT_GT(sink->SettleLimitMs(), 10000);  // message.timeout.ms plus a margin
  cluster.SetRtt(0);
}

// A batch whose broker holds its answer past the batch's deadline gives up
// alone: a batch sent later to a broker that answers is not purged with it
// (which would fail messages that were being written, duplicating them on
// the next attempt, and make a working sink look down). Forced: broker 1
// answers after 20 s, broker 2 after 0.8 s, and the second batch is sent
// just before the first one's deadline, so it is in flight at that moment.
TEST(KafkaSink, ABatchPastItsDeadlineGivesUpAloneAndLaterBatchesAreAnswered) {
  MockCluster cluster;
  cluster.CreateTopic("stalled", 1);
  cluster.CreateTopic("answering", 1);
  cluster.SetLeader("stalled", 0, 1);
  cluster.SetLeader("answering", 0, 2);
  // message.timeout.ms=0: librdkafka never times a message out itself, so
  // only the sink's own deadline (shortened here to 3 s) ends the wait.
  std::string error;
  auto sink = MakeKafkaSinkWithLimits(
      "test", {Opt("bootstrap.servers", cluster.Bootstraps()), Opt("message.timeout.ms", "0")},
      &error, true, KafkaLimits{1000, 2000});
  ASSERT_NE(sink, nullptr) << error;
  WarmUp(*sink, "stalled", std::string("s"), "w");
  WarmUp(*sink, "answering", std::string("a"), "w");
  const int64_t limit_ms = sink->SettleLimitMs();  // message.timeout.ms plus a margin

  cluster.SetRtt(1, 20000);
  cluster.SetRtt(2, 800);
  Batch first;
  first.Add("stalled", std::string("s"), "first");
  const Clock::time_point start = Clock::now();
  first.SendTo(*sink);
  std::this_thread::sleep_until(start + std::chrono::milliseconds(limit_ms - 300));
  Batch second;
  second.Add("answering", std::string("a"), "second");
  second.SendTo(*sink);

  ExpectAll(first.CollectFrom(*sink), DeliveryStatus::kRetriable, "no delivery report within");
  EXPECT_LT(SecondsSince(start), limit_ms / 1000.0 + 1.0);
  ExpectAll(second.CollectFrom(*sink), DeliveryStatus::kDelivered);
  EXPECT_FALSE(sink->NeedsRecreate());

  cluster.SetRtt(0);
  const auto got = Consume(cluster, "answering", 1, 2, 10000, 300);
  std::vector<std::string> values;
  for (const Received &r : got) values.push_back(r.value);
  EXPECT_EQ(values, (std::vector<std::string>{"w", "second"}));
}

TEST(KafkaSink, InterruptStopsWaitingAndReportsRetriable) {
  MockCluster cluster;
  cluster.CreateTopic("events", 3);
  auto sink = MakeSink(cluster, {Opt("reconnect.backoff.max.ms", "200")});
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "events", std::string("k"), "{}");

  cluster.SetAllBrokers(false);
  static std::atomic<int> checks;
  checks = 0;
  Batch batch;
  for (int i = 0; i < 10; ++i) batch.Add("events", "k" + std::to_string(i), "{}");
  const Clock::time_point start = Clock::now();
  ExpectAll(batch.PublishTo(*sink, [] { return ++checks >= 3; }), DeliveryStatus::kRetriable,
            "interrupted");
  EXPECT_LT(SecondsSince(start), 2.0);  // message.timeout.ms is 10 s
  EXPECT_EQ(checks.load(), 3);

  cluster.SetAllBrokers(true);
  Batch again;
  for (int i = 0; i < 10; ++i) again.Add("events", "k" + std::to_string(i), "{}");
  ExpectAll(again.PublishTo(*sink), DeliveryStatus::kDelivered);
  EXPECT_FALSE(sink->NeedsRecreate());
}

TEST(KafkaSink, InterruptPurgesInFlightAndLateAnswersAreIgnored) {
  MockCluster cluster;
  cluster.CreateTopic("slow", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "slow", std::string("k"), "w");

  cluster.SetRtt(1500);  // produce requests stay in flight
  static std::atomic<int> checks;
  checks = 0;
  Batch batch;
  for (int i = 0; i < 5; ++i) batch.Add("slow", std::string("k"), "a" + std::to_string(i));
  const Clock::time_point start = Clock::now();
  ExpectAll(batch.PublishTo(*sink, [] { return ++checks >= 2; }), DeliveryStatus::kRetriable,
            "interrupted");
  EXPECT_LT(SecondsSince(start), 1.4);

  // The next batch starts while the purged requests' answers are on their way.
  cluster.SetRtt(0);
  Batch next;
  for (int i = 0; i < 5; ++i) next.Add("slow", std::string("k"), "b" + std::to_string(i));
  ExpectAll(next.PublishTo(*sink), DeliveryStatus::kDelivered);
  std::this_thread::sleep_for(std::chrono::milliseconds(1600));
  sink->Poll();
  for (const Delivery &d : next.results) EXPECT_EQ(d.status, DeliveryStatus::kDelivered);
  EXPECT_FALSE(sink->NeedsRecreate());

  // The purged messages may have been written all the same (at least once);
  // the next batch follows them in order.
  const auto got = Consume(cluster, "slow", 1, 6, 10000, 300);
  std::vector<std::string> values;
  for (const Received &r : got) values.push_back(r.value);
  ASSERT_GE(values.size(), 6u);
  EXPECT_EQ(values.front(), "w");
  const std::vector<std::string> tail(values.end() - 5, values.end());
  EXPECT_EQ(tail, (std::vector<std::string>{"b0", "b1", "b2", "b3", "b4"}));
}

TEST(KafkaSink, QueueFullIsWaitedOut) {
  MockCluster cluster;
  cluster.CreateTopic("burst", 1);
  auto sink = MakeSink(cluster, {Opt("queue.buffering.max.messages", "10")});
  ASSERT_NE(sink, nullptr);
  Batch batch;
  for (int i = 0; i < 200; ++i) batch.Add("burst", std::string("k"), std::to_string(i));
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kDelivered);
  const auto got = Consume(cluster, "burst", 1, 200);
  ASSERT_EQ(got.size(), 200u);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].value, std::to_string(i));
}

TEST(KafkaSink, EmptyBatchReturnsAtOnce) {
  MockCluster cluster;
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  const Clock::time_point start = Clock::now();
  sink->Publish(nullptr, 0, nullptr, nullptr);
  EXPECT_LT(SecondsSince(start), 0.1);
}

TEST(KafkaSink, FatalErrorAsksForRecreate) {
  MockCluster cluster;
  cluster.CreateTopic("fatal", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "fatal", std::string("k"), "0");
  EXPECT_FALSE(sink->NeedsRecreate());

  // The idempotent producer cannot recover from a lost sequence.
  rd_kafka_mock_push_request_errors(cluster.get(), kProduceApi, 1,
                                    RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER);
  Batch batch;
  batch.Add("fatal", std::string("k"), "1").Add("fatal", std::string("k"), "2");
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kRetriable, "OUT_OF_ORDER_SEQUENCE_NUMBER");
  EXPECT_TRUE(sink->NeedsRecreate());
  EXPECT_EQ(sink->State(), "failed");
  sink->Poll();
  EXPECT_TRUE(HasLine(sink->TakeLogs(), "fatal error, the producer must be recreated"));

  // Until it is recreated, the sink does not even try.
  Batch after;
  after.Add("fatal", std::nullopt, "3");
  ExpectAll(after.PublishTo(*sink), DeliveryStatus::kRetriable, "must be recreated");
}

// librdkafka keeps every topic a producer wrote to until the producer is
// destroyed: past max_topics distinct topics the sink asks to be replaced
// (Sink::Worn), and it still delivers what it was given.
TEST(KafkaSink, AProducerThatWroteToManyDistinctTopicsAsksToBeReplaced) {
  MockCluster cluster;
  for (const char *t : {"t1", "t2", "t3"}) cluster.CreateTopic(t, 1);
  KafkaLimits limits;
  limits.max_topics = 3;
  std::string error;
  auto sink = MakeKafkaSinkWithLimits("test", {Opt("bootstrap.servers", cluster.Bootstraps())},
                                      &error, true, limits);
  ASSERT_NE(sink, nullptr) << error;
  Batch two;
  two.Add("t1", std::string("k"), "1")
      .Add("t2", std::string("k"), "2")
      .Add("t1", std::nullopt, "3");
  ExpectAll(two.PublishTo(*sink), DeliveryStatus::kDelivered);
  EXPECT_FALSE(sink->Worn()) << "two distinct topics";
  Batch third;
  third.Add("t3", std::string("k"), "4");
  ExpectAll(third.PublishTo(*sink), DeliveryStatus::kDelivered);
  EXPECT_TRUE(sink->Worn()) << "three distinct topics";
  EXPECT_FALSE(sink->NeedsRecreate()) << "nothing failed";
}

TEST(KafkaSink, RejectionAfterFatalErrorIsLeftToTheNextProducer) {
  MockCluster cluster;
  cluster.CreateTopic("gapless", 1);
  // With the gap-less guarantee, a batch the broker refuses is fatal.
  auto sink = MakeSink(cluster, {Opt("enable.gapless.guarantee", "true")});
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "gapless", std::string("k"), "0");
  rd_kafka_mock_push_request_errors(cluster.get(), kProduceApi, 1,
                                    RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  Batch batch;
  batch.Add("gapless", std::string("k"), "1");
  ExpectAll(batch.PublishTo(*sink), DeliveryStatus::kRetriable, "MSG_SIZE_TOO_LARGE");
  EXPECT_TRUE(sink->NeedsRecreate());
}

// ------------------------------------------------------------ logs, state, teardown

TEST(KafkaSink, LogsAreCollectedOnOwnerThread) {
  MockCluster cluster;
  auto sink = MakeSink(cluster, {Opt("debug", "broker")});
  ASSERT_NE(sink, nullptr);
  sink->TakeLogs();
  // librdkafka's threads log while connecting, but nothing reaches us...
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(sink->TakeLogs().empty());
  // ...until the owner serves the queue.
  sink->Poll();
  const std::vector<LogLine> lines = sink->TakeLogs();
  ASSERT_FALSE(lines.empty());
  bool debug = false;
  for (const LogLine &line : lines) debug = debug || line.level == LogLevel::kDebug;
  EXPECT_TRUE(debug);
  EXPECT_TRUE(sink->TakeLogs().empty());
}

TEST(KafkaSink, UnreachableBrokersShowAsDownInStateAndLogs) {
  std::string error;
  auto sink = MakeKafkaSink("s", {Opt("bootstrap.servers", "127.0.0.1:1")}, &error);
  ASSERT_NE(sink, nullptr) << error;
  std::vector<LogLine> lines;
  for (int i = 0; i < 40 && sink->State() != "down"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sink->Poll();
  }
  EXPECT_EQ(sink->State(), "down");
  lines = sink->TakeLogs();
  EXPECT_TRUE(HasLine(lines, "_ALL_BROKERS_DOWN"));
}

TEST(KafkaSink, DestroyWhileBrokersDownDoesNotHang) {
  MockCluster cluster;
  cluster.CreateTopic("events", 1);
  auto sink = MakeSink(cluster);
  ASSERT_NE(sink, nullptr);
  WarmUp(*sink, "events", std::string("k"), "{}");

  cluster.SetAllBrokers(false);
  Batch batch;
  for (int i = 0; i < 5; ++i) batch.Add("events", std::string("k"), "{}");
  batch.PublishTo(*sink, [] { return true; });
  ExpectAll(batch.results, DeliveryStatus::kRetriable, "interrupted");
  const Clock::time_point start = Clock::now();
  sink.reset();
  EXPECT_LT(SecondsSince(start), 3.0);

  // And one that never reached a broker.
  std::string error;
  sink = MakeKafkaSink("s", {Opt("bootstrap.servers", "127.0.0.1:1")}, &error);
  ASSERT_NE(sink, nullptr) << error;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const Clock::time_point start2 = Clock::now();
  sink.reset();
  EXPECT_LT(SecondsSince(start2), 3.0);
}

// ------------------------------------------------------------ classification

TEST(KafkaSinkErrors, RejectsWhatConcernsTheMessageAndRetriesTheRest) {
  for (const rd_kafka_resp_err_t err :
       {RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE, RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE,
        RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE, RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED,
        RD_KAFKA_RESP_ERR_INVALID_RECORD, RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION,
        RD_KAFKA_RESP_ERR__INVALID_ARG, RD_KAFKA_RESP_ERR_INVALID_MSG,
        RD_KAFKA_RESP_ERR_UNSUPPORTED_FOR_MESSAGE_FORMAT, RD_KAFKA_RESP_ERR_POLICY_VIOLATION}) {
    EXPECT_EQ(ClassifyKafkaError(err), DeliveryStatus::kRejected) << rd_kafka_err2name(err);
  }
  for (const rd_kafka_resp_err_t err :
       {RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__TRANSPORT,
        RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION,
        RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR__PURGE_QUEUE, RD_KAFKA_RESP_ERR__PURGE_INFLIGHT, RD_KAFKA_RESP_ERR__FATAL,
        RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER}) {
    EXPECT_EQ(ClassifyKafkaError(err), DeliveryStatus::kRetriable) << rd_kafka_err2name(err);
  }
  // The topic, not the message nor the sink: an attempt each, never "down".
  for (const rd_kafka_resp_err_t err :
       {RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART,
        RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED}) {
    EXPECT_EQ(ClassifyKafkaError(err), DeliveryStatus::kTargetRefused) << rd_kafka_err2name(err);
  }
  EXPECT_EQ(ClassifyKafkaError(RD_KAFKA_RESP_ERR_NO_ERROR), DeliveryStatus::kDelivered);
  EXPECT_EQ(KafkaErrorText(RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE),
            "MSG_SIZE_TOO_LARGE: Broker: Message size too large");
  EXPECT_EQ(KafkaErrorText(RD_KAFKA_RESP_ERR__MSG_TIMED_OUT),
            "_MSG_TIMED_OUT: Local: Message timed out");
}

TEST(KafkaSinkErrors, TopicNamesFollowKafkasRules) {
  EXPECT_TRUE(IsValidKafkaTopic("orders"));
  EXPECT_TRUE(IsValidKafkaTopic("a.b_c-D9"));
  EXPECT_TRUE(IsValidKafkaTopic(std::string(249, 'x')));
  EXPECT_FALSE(IsValidKafkaTopic(std::string(250, 'x')));
  EXPECT_FALSE(IsValidKafkaTopic(""));
  EXPECT_FALSE(IsValidKafkaTopic("."));
  EXPECT_FALSE(IsValidKafkaTopic(".."));
  EXPECT_FALSE(IsValidKafkaTopic("bad topic"));
  EXPECT_FALSE(IsValidKafkaTopic("ä"));
}

}  // namespace
}  // namespace outbox
