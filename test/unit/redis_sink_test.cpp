// The Redis sink against a real redis-server started on a free loopback port
// for each test: what arrives in Redis, how replies are classified, and that
// Publish stays bounded when the server dies, hangs or is interrupted.
#include "sinks/redis_sink.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

struct ReplyDeleter {
  void operator()(redisReply *reply) const {
    if (reply != nullptr) freeReplyObject(reply);
  }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

std::string Str(const redisReply *reply) {
  if (reply == nullptr || reply->str == nullptr) return "";
  return std::string(reply->str, reply->len);
}

// A blocking hiredis connection for the test to look at what arrived.
class Client {
 public:
  Client(int port, const std::string &password = "", int db = 0) {
    const timeval tv{5, 0};
    c_ = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (c_ == nullptr || c_->err != 0) return;
    redisSetTimeout(c_, tv);
    if (!password.empty()) Command({"AUTH", password});
    if (db != 0) Command({"SELECT", std::to_string(db)});
  }
  ~Client() {
    if (c_ != nullptr) redisFree(c_);
  }
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  bool ok() const { return c_ != nullptr && c_->err == 0; }
  redisContext *get() const { return c_; }

  Reply Command(const std::vector<std::string> &args) {
    if (!ok()) return nullptr;
    std::vector<const char *> argv;
    std::vector<size_t> lengths;
    for (const std::string &arg : args) {
      argv.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    return Reply(static_cast<redisReply *>(
        redisCommandArgv(c_, static_cast<int>(argv.size()), argv.data(), lengths.data())));
  }
  std::string String(const std::vector<std::string> &args) { return Str(Command(args).get()); }
  long long Integer(const std::vector<std::string> &args) {
    Reply reply = Command(args);
    return reply != nullptr && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
  }
  std::vector<std::string> List(const std::vector<std::string> &args) {
    Reply reply = Command(args);
    std::vector<std::string> items;
    if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) return items;
    for (size_t i = 0; i < reply->elements; ++i) items.push_back(Str(reply->element[i]));
    return items;
  }
  // A counter from INFO, e.g. ("stats", "total_reads_processed").
  long long Info(const std::string &section, const std::string &field) {
    std::istringstream lines(String({"INFO", section}));
    std::string line;
    while (std::getline(lines, line)) {
      if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
    }
    return -1;
  }

 private:
  redisContext *c_ = nullptr;
};

// One stream entry: its field/value pairs, in order.
using Entry = std::vector<std::pair<std::string, std::string>>;

std::vector<Entry> ReadStream(Client *client, const std::string &key) {
  std::vector<Entry> entries;
  Reply reply = client->Command({"XRANGE", key, "-", "+"});
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) return entries;
  for (size_t i = 0; i < reply->elements; ++i) {
    const redisReply *fields = reply->element[i]->element[1];
    Entry entry;
    for (size_t f = 0; f + 1 < fields->elements; f += 2) {
      entry.emplace_back(Str(fields->element[f]), Str(fields->element[f + 1]));
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

// A redis-server child process on a loopback port of its own.
class RedisServer {
 public:
  explicit RedisServer(std::vector<std::string> extra = {}) : extra_(std::move(extra)) {
    char dir[] = "/tmp/redis_sink_test.XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    for (int attempt = 0; attempt < 5 && pid_ <= 0; ++attempt) {
      port_ = FreePort();
      if (!Start()) Kill();  // the port was taken meanwhile: another one
    }
  }
  ~RedisServer() {
    Kill();
    if (!dir_.empty()) {
      std::remove((dir_ + "/redis.log").c_str());
      rmdir(dir_.c_str());
    }
  }
  RedisServer(const RedisServer &) = delete;
  RedisServer &operator=(const RedisServer &) = delete;

  int port() const { return port_; }
  bool running() const { return pid_ > 0; }

  // Starts the server on port(); true once it answers.
  bool Start() {
    // No persistence: every start is an empty server.
    std::vector<std::string> args = {"redis-server", "--port", std::to_string(port_), "--dir",
                                     dir_};
    for (const char *arg : {"--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                            "--daemonize", "no", "--logfile", "", "--loglevel", "warning"}) {
      args.push_back(arg);
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    std::vector<char *> argv;
    for (std::string &arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const std::string log = dir_ + "/redis.log";
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      execvp("redis-server", argv.data());
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
  void Pause() { kill(pid_, SIGSTOP); }
  void Resume() { kill(pid_, SIGCONT); }

 private:
  bool WaitReady() {
    const Clock::time_point start = Clock::now();
    while (SecondsSince(start) < 10) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = 0;
        return false;
      }
      const timeval tv{1, 0};
      redisContext *c = redisConnectWithTimeout("127.0.0.1", port_, tv);
      if (c != nullptr && c->err == 0) {
        redisSetTimeout(c, tv);
        Reply reply(static_cast<redisReply *>(redisCommand(c, "PING")));
        const std::string text = Str(reply.get());
        redisFree(c);
        // NOAUTH: a server with requirepass is up too. LOADING: not yet.
        if (text == "PONG" || text.rfind("NOAUTH", 0) == 0) return true;
      } else if (c != nullptr) {
        redisFree(c);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  std::vector<std::string> extra_;
  std::string dir_;
  int port_ = 0;
  pid_t pid_ = 0;
};

// Messages whose views point into strings the test keeps.
struct Batch {
  struct Owned {
    std::string id, topic, target, key, payload, headers_json;
    bool has_key = false;
  };
  std::vector<std::unique_ptr<Owned>> owned;
  std::vector<OutMessage> messages;
  std::vector<Delivery> results;

  Batch &Add(std::string target, std::optional<std::string> key, std::string payload,
             std::string headers_json = "{}", std::string topic = "") {
    auto o = std::make_unique<Owned>();
    o->id = "0190f5f0-0000-7000-8000-" + std::to_string(100000000000 + owned.size());
    o->topic = topic.empty() ? "orders.created" : std::move(topic);
    o->target = std::move(target);
    o->has_key = key.has_value();
    if (key) o->key = *key;
    o->payload = std::move(payload);
    o->headers_json = std::move(headers_json);
    owned.push_back(std::move(o));
    return *this;
  }

  void Publish(Sink *sink, Sink::InterruptCheck interrupted = nullptr) {
    messages.clear();
    for (const auto &o : owned) {
      OutMessage m;
      m.id = o->id;
      m.topic = o->topic;
      m.target = o->target;
      m.has_key = o->has_key;
      m.key = o->key;
      m.payload = o->payload;
      m.headers_json = o->headers_json;
      messages.push_back(m);
    }
    results.assign(messages.size(), Delivery{DeliveryStatus::kNotSent, "unset"});
    sink->Publish(messages.data(), messages.size(), results.data(), interrupted);
  }

  size_t Count(DeliveryStatus status) const {
    size_t count = 0;
    for (const Delivery &d : results) count += d.status == status ? 1 : 0;
    return count;
  }
};

std::unique_ptr<Sink> MakeSink(int port, std::vector<SinkOption> more = {}) {
  SinkOptions options = {Opt("host", "127.0.0.1"), Opt("port", std::to_string(port))};
  options.insert(options.end(), more.begin(), more.end());
  std::string error;
  std::unique_ptr<Sink> sink = MakeRedisSink("test", options, &error);
  EXPECT_NE(sink, nullptr) << error;
  return sink;
}

std::string AllLogs(Sink *sink) {
  std::string text;
  for (const LogLine &line : sink->TakeLogs()) text += line.text + "\n";
  return text;
}

#define REQUIRE_SERVER(server) ASSERT_TRUE((server).running()) << "redis-server did not start"

TEST(RedisSink, OptionsAreValidatedAtCreation) {
  std::string error;
  EXPECT_EQ(MakeRedisSink("bad", {Opt("hostname", "x")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "unknown option \"hostname\""));
  EXPECT_EQ(MakeRedisSink("bad", {Opt("mode", "list"), Opt("maxlen", "5")}, &error), nullptr);
  EXPECT_TRUE(Contains(error, "maxlen"));
  // Creating a sink connects to nothing: no server listens on this port.
  std::unique_ptr<Sink> sink =
      MakeRedisSink("ok", {Opt("port", std::to_string(FreePort()))}, &error);
  ASSERT_NE(sink, nullptr);
  EXPECT_EQ(sink->State(), "idle");
  EXPECT_FALSE(sink->NeedsRecreate());
  EXPECT_TRUE(sink->TakeLogs().empty());
}

TEST(RedisSink, EmptyBatchReturnsAtOnce) {
  std::unique_ptr<Sink> sink = MakeSink(FreePort());
  const Clock::time_point start = Clock::now();
  sink->Publish(nullptr, 0, nullptr, nullptr);
  EXPECT_LT(SecondsSince(start), 0.05);
  EXPECT_EQ(sink->State(), "idle");  // it did not even try to connect
  EXPECT_TRUE(sink->TakeLogs().empty());
}

TEST(RedisSink, StreamModeWritesContractFields) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("orders", "customer-7", R"({"total":12.5,"items":[1,2]})", R"({"trace":"abc"})");
  batch.Add("orders", std::nullopt, "null", "{}", "orders.cancelled");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.results[0].error;
  EXPECT_EQ(batch.results[0].error, "");
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_TRUE(Contains(AllLogs(sink.get()),
                       "connected to 127.0.0.1:" + std::to_string(server.port()) + " db 0"));

  Client client(server.port());
  const std::vector<Entry> entries = ReadStream(&client, "orders");
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0], (Entry{{"id", batch.owned[0]->id},
                               {"topic", "orders.created"},
                               {"key", "customer-7"},
                               {"payload", R"({"total":12.5,"items":[1,2]})"},
                               {"headers", R"({"trace":"abc"})"}}));
  // No key: an empty string, as the contract says.
  EXPECT_EQ(entries[1], (Entry{{"id", batch.owned[1]->id},
                               {"topic", "orders.cancelled"},
                               {"key", ""},
                               {"payload", "null"},
                               {"headers", "{}"}}));
  EXPECT_EQ(client.Integer({"XLEN", "orders"}), 2);
}

TEST(RedisSink, ArgumentsAreBinarySafe) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  // Spaces, quotes, CR LF, NUL and a RESP-looking text: sent as arguments,
  // never formatted into a command, they arrive byte for byte.
  const std::string target = std::string("odd key \"x\"\r\n*3\r\n$3\r\nDEL\0z", 27);
  const std::string key = std::string("k\0\r\n%s%b", 9);
  Batch batch;
  batch.Add(target, key, R"({"s":"%s %b \r\n"})");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  Client client(server.port());
  const std::vector<Entry> entries = ReadStream(&client, target);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0][2].second, key);
  EXPECT_EQ(entries[0][3].second, R"({"s":"%s %b \r\n"})");
  EXPECT_EQ(client.Integer({"DBSIZE"}), 1);
}

TEST(RedisSink, StreamMaxlenTrimsApproximately) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("maxlen", "10")});
  for (int round = 0; round < 5; ++round) {
    Batch batch;
    for (int i = 0; i < 200; ++i) batch.Add("trimmed", "k", std::to_string(round * 200 + i));
    batch.Publish(sink.get());
    ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 200u) << batch.results[0].error;
  }
  Client client(server.port());
  // "~" trims whole macro nodes (stream-node-max-entries = 100): at least
  // 10 entries stay, and far fewer than the 1000 written.
  const long long length = client.Integer({"XLEN", "trimmed"});
  EXPECT_GE(length, 10);
  EXPECT_LE(length, 10 + 100);
  const std::vector<Entry> entries = ReadStream(&client, "trimmed");
  ASSERT_FALSE(entries.empty());
  EXPECT_EQ(entries.back()[3].second, "999");  // the newest entries are kept
}

TEST(RedisSink, ListModePushesEnvelope) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("mode", "list")});
  Batch batch;
  batch.Add("queue", std::nullopt, R"({"a":[1,2,{"b":null}],"s":"x\"y"})", R"({"h":"v"})");
  batch.Add("queue", std::string("quote\" back\\ nl\n tab\t bell\x07 \xc3\xa9"), "42", "{}",
            "topic/with\"quote");
  batch.Add("queue", std::string(""), "[]", "");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u) << batch.results[0].error;

  Client client(server.port());
  const std::vector<std::string> items = client.List({"LRANGE", "queue", "0", "-1"});
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0], "{\"id\":\"" + batch.owned[0]->id +
                          R"(","topic":"orders.created","key":null,)"
                          R"("payload":{"a":[1,2,{"b":null}],"s":"x\"y"},"headers":{"h":"v"}})");
  EXPECT_EQ(items[1], "{\"id\":\"" + batch.owned[1]->id +
                          R"(","topic":"topic/with\"quote",)"
                          R"("key":"quote\" back\\ nl\n tab\t bell\u0007 )"
                          "\xc3\xa9"
                          R"(","payload":42,"headers":{}})");
  // An empty key is a key (""), not null; missing headers are "{}".
  EXPECT_EQ(items[2], "{\"id\":\"" + batch.owned[2]->id +
                          R"(","topic":"orders.created","key":"","payload":[],"headers":{}})");
}

TEST(RedisSink, EnvelopeEscapesLikePostgres) {
  std::string out;
  AppendJsonString(std::string("a\"b\\c\b\f\n\r\t\x01\x1f\x7f\0end", 17), &out);
  EXPECT_EQ(out, std::string(R"("a\"b\\c\b\f\n\r\t\u0001\u001f)") + "\x7f" + R"(\u0000end")");
}

TEST(RedisSink, PublishModeReachesSubscriber) {
  RedisServer server;
  REQUIRE_SERVER(server);
  Client subscriber(server.port());
  ASSERT_TRUE(subscriber.ok());
  Reply subscribed = subscriber.Command({"SUBSCRIBE", "events"});
  ASSERT_NE(subscribed, nullptr);
  ASSERT_EQ(subscribed->type, REDIS_REPLY_ARRAY);

  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("mode", "publish")});
  Batch batch;
  batch.Add("events", "k1", R"({"n":1})");
  batch.Add("events", std::nullopt, R"({"n":2})");
  batch.Add("nobody-listens", "k", "{}");
  batch.Publish(sink.get());
  // Pub/sub keeps nothing: no subscriber is still a delivery.
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u) << batch.results[0].error;

  for (int n = 1; n <= 2; ++n) {
    void *raw = nullptr;
    ASSERT_EQ(redisGetReply(subscriber.get(), &raw), REDIS_OK);
    Reply message(static_cast<redisReply *>(raw));
    ASSERT_EQ(message->type, REDIS_REPLY_ARRAY);
    ASSERT_EQ(message->elements, 3u);
    EXPECT_EQ(Str(message->element[0]), "message");
    EXPECT_EQ(Str(message->element[1]), "events");
    const std::string key = n == 1 ? R"("k1")" : "null";
    EXPECT_EQ(Str(message->element[2]),
              "{\"id\":\"" + batch.owned[n - 1]->id + R"(","topic":"orders.created","key":)" + key +
                  R"(,"payload":{"n":)" + std::to_string(n) + R"(},"headers":{}})");
  }
}

TEST(RedisSink, BatchIsPipelinedInOneRoundTrip) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch warmup;
  warmup.Add("warm", "k", "{}");
  warmup.Publish(sink.get());  // connect first: only the batch is measured
  ASSERT_EQ(warmup.results[0].status, DeliveryStatus::kDelivered);

  Client client(server.port());
  Batch batch;
  // Distinct keys: one round (a key's second message would wait for the
  // first one's reply, see AKeysNextMessageWaitsForTheReplyToItsFirst).
  for (int i = 0; i < 1000; ++i) batch.Add("piped", std::to_string(i), R"({"i":1})");
  const long long reads_before = client.Info("stats", "total_reads_processed");
  const long long writes_before = client.Info("stats", "total_writes_processed");
  batch.Publish(sink.get());
  const long long reads = client.Info("stats", "total_reads_processed") - reads_before;
  const long long writes = client.Info("stats", "total_writes_processed") - writes_before;
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 1000u);
  // One command per round trip would take at least 1000 reads and 1000
  // writes on the server. A pipeline of ~150 kB arrives in a handful of
  // reads, and the replies leave in as many writes (each INFO above adds one).
  EXPECT_LE(reads, 60) << "server reads for 1000 commands";
  EXPECT_LE(writes, 60) << "server writes for 1000 replies";
  EXPECT_EQ(client.Integer({"XLEN", "piped"}), 1000);
}

TEST(RedisSink, HugeBatchIsSentInSeveralPipelinesInOrder) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("mode", "list")});
  Batch batch;
  const std::string filler(4000, 'x');
  for (int i = 0; i < 3000; ++i) {  // about 12 MB: three pipelines of 4 MB (one round)
    batch.Add("big", std::to_string(i), "[" + std::to_string(i) + ",\"" + filler + "\"]");
  }
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 3000u) << batch.results[0].error;
  Client client(server.port());
  ASSERT_EQ(client.Integer({"LLEN", "big"}), 3000);
  for (int i : {0, 1, 1047, 1048, 2999}) {
    const std::string item = client.String({"LINDEX", "big", std::to_string(i)});
    EXPECT_TRUE(Contains(item, "\"payload\":[" + std::to_string(i) + ",")) << "item " << i;
  }
}

TEST(RedisSink, PerKeyOrderInStream) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  for (int i = 0; i < 2000; ++i) batch.Add("ordered", i % 2 == 0 ? "a" : "b", std::to_string(i));
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2000u);
  Client client(server.port());
  const std::vector<Entry> entries = ReadStream(&client, "ordered");
  ASSERT_EQ(entries.size(), 2000u);
  for (int i = 0; i < 2000; ++i) {
    ASSERT_EQ(entries[i][0].second, batch.owned[i]->id) << "entry " << i;
    ASSERT_EQ(entries[i][3].second, std::to_string(i)) << "entry " << i;
  }
}

// Red team (TAP 952): a pipeline that straddles the end of a passing state
// of the server (BUSY while another client's script runs) had the first
// event of a key refused and the second applied. A key's second message now
// goes only after the first one's reply, and not at all when it failed.
TEST(RedisSink, AKeysNextMessageWaitsForTheReplyToItsFirst) {
  RedisServer server({"--busy-reply-threshold", "20"});
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch warmup;
  warmup.Add("warm", "k", "{}");
  warmup.Publish(sink.get());  // connected before the server gets busy
  ASSERT_EQ(warmup.results[0].status, DeliveryStatus::kDelivered);

  // Another client runs a script for 1.5 s: Redis answers BUSY meanwhile.
  // The batch goes once a PING is answered BUSY (not after a fixed sleep: on
  // a loaded machine the script may not have started by then).
  std::thread busy([port = server.port()] {
    Client client(port);
    client.Command({"EVAL",
                    "local t0 = redis.call('TIME') "
                    "while true do local t = redis.call('TIME') "
                    "if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 1500000 then break end end "
                    "return 1",
                    "0"});
  });
  {
    Client probe(server.port());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!Contains(probe.String({"PING"}), "BUSY") &&
           std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  Batch batch;
  batch.Add("s", "k", "1").Add("s", "j", "2").Add("s", "k", "3");
  batch.Publish(sink.get());
  busy.join();
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "BUSY")) << batch.results[0].error;
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kNotSent)
      << "never sent behind its key's refused first message";
  Client client(server.port());
  EXPECT_EQ(client.Integer({"XLEN", "s"}), 0);

  // Once the server is free, the whole batch goes, in order.
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u) << batch.results[0].error;
  const std::vector<Entry> entries = ReadStream(&client, "s");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0][3].second, "1");
  EXPECT_EQ(entries[2][3].second, "3");
}

TEST(RedisSink, WrongTypeRejectsOnlyThatMessage) {
  RedisServer server;
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_EQ(client.String({"SET", "not-a-stream", "x"}), "OK");
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("good", "k", "1");
  batch.Add("not-a-stream", "k", "2");
  batch.Add("good", "j", "3");
  batch.Add("good", "k", "4");  // the same key, after its refused message
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kRejected);
  EXPECT_TRUE(Contains(batch.results[1].error, "WRONGTYPE"));
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kDelivered);
  // A route without a target sends a key's events to several streams: the
  // key's next one waits behind the refused one, whatever its stream.
  EXPECT_EQ(batch.results[3].status, DeliveryStatus::kNotSent);
  EXPECT_EQ(client.Integer({"XLEN", "good"}), 2);
  EXPECT_EQ(client.String({"GET", "not-a-stream"}), "x");
  EXPECT_EQ(sink->State(), "connected");

  // The same connection goes on working.
  Batch next;
  next.Add("good", "k", "4");
  next.Publish(sink.get());
  EXPECT_EQ(next.results[0].status, DeliveryStatus::kDelivered);
  EXPECT_EQ(client.Integer({"XLEN", "good"}), 3);
}

TEST(RedisSink, OutOfMemoryIsRetriable) {
  RedisServer server;
  REQUIRE_SERVER(server);
  Client client(server.port());
  ASSERT_EQ(client.String({"CONFIG", "SET", "maxmemory", "1"}), "OK");
  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("mode", "list")});
  Batch batch;
  batch.Add("l", "k", "1").Add("l", "j", "2");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kRetriable), 2u);
  EXPECT_TRUE(Contains(batch.results[0].error, "OOM"));
  EXPECT_EQ(sink->State(), "connected");  // the server answers; it is only full

  ASSERT_EQ(client.String({"CONFIG", "SET", "maxmemory", "0"}), "OK");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u);
}

TEST(RedisSink, ReadOnlyReplicaIsRetriableAndReconnects) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("s", "k", "1");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.results[0].status, DeliveryStatus::kDelivered);
  sink->TakeLogs();

  // As after a failover: the address now leads to a replica.
  Client client(server.port());
  ASSERT_EQ(client.String({"REPLICAOF", "127.0.0.1", std::to_string(FreePort())}), "OK");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "READONLY"));
  EXPECT_EQ(sink->State(), "down");
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "READONLY"));

  ASSERT_EQ(client.String({"REPLICAOF", "NO", "ONE"}), "OK");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "connected to"));  // a new connection
}

TEST(RedisSink, ServerDownGivesRetriableAndRecoversAfterRestart) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("s", "k", "1").Add("s", "k", "2").Add("t", std::nullopt, "3");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u);
  sink->TakeLogs();

  server.Kill();
  Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  EXPECT_LT(SecondsSince(start), 1.0);  // refused at once, no timeout needed
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 3u);
  EXPECT_TRUE(Contains(batch.results[0].error, "cannot connect to 127.0.0.1:"));
  EXPECT_EQ(sink->State(), "down");
  std::vector<LogLine> logs = sink->TakeLogs();
  ASSERT_FALSE(logs.empty());
  EXPECT_TRUE(Contains(logs.back().text, "Connection refused"));
  EXPECT_EQ(logs.back().level, LogLevel::kWarning);

  // Still down: tried once more per Publish, and the same reason is not
  // repeated as a warning.
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 3u);
  for (const LogLine &line : sink->TakeLogs()) EXPECT_EQ(line.level, LogLevel::kDebug);

  ASSERT_TRUE(server.Start());
  start = Clock::now();
  batch.Publish(sink.get());
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 3u) << batch.results[0].error;
  EXPECT_EQ(sink->State(), "connected");
  Client client(server.port());
  EXPECT_EQ(client.Integer({"XLEN", "s"}), 2);  // the restarted server kept nothing
}

TEST(RedisSink, ServerClosedIdleConnectionIsReopened) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("s", "k", "1");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.results[0].status, DeliveryStatus::kDelivered);

  Client client(server.port());
  EXPECT_EQ(client.Integer({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"}), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // let the close arrive
  batch.Publish(sink.get());
  // Noticed before sending: nothing fails, nothing is sent twice.
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  EXPECT_TRUE(Contains(AllLogs(sink.get()), "was closed; reconnecting"));
  EXPECT_EQ(client.Integer({"XLEN", "s"}), 2);
}

TEST(RedisSink, UnresponsiveServerTimesOut) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("s", "k", "1").Add("s", "k", "2");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u);

  server.Pause();
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get());
  const double seconds = SecondsSince(start);
  server.Resume();
  EXPECT_GE(seconds, 1.9);  // the I/O timeout, 2 s without progress
  EXPECT_LT(seconds, 3.5);
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "no answer within 2000 ms"));
  // The key's second message was never sent (its round never came): it is
  // not charged an attempt.
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kNotSent);
  EXPECT_TRUE(Contains(batch.results[1].error, "not sent")) << batch.results[1].error;
  EXPECT_EQ(sink->State(), "down");

  // The sent batch may still be applied once the server wakes: at least once.
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.results[0].error;
  EXPECT_EQ(sink->State(), "connected");
}

std::atomic<int> interrupt_calls{0};
std::atomic<bool> interrupt_now{false};
bool InterruptFlag() {
  interrupt_calls.fetch_add(1);
  return interrupt_now.load();
}

TEST(RedisSink, InterruptStopsAndReportsRetriable) {
  RedisServer server;
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("s", "k", "1").Add("s", "k", "2");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u);

  // Interrupted while waiting for a server that does not answer.
  server.Pause();
  interrupt_now = false;
  interrupt_calls = 0;
  std::thread interrupter([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    interrupt_now = true;
  });
  const Clock::time_point start = Clock::now();
  batch.Publish(sink.get(), InterruptFlag);
  const double seconds = SecondsSince(start);
  interrupter.join();
  server.Resume();
  EXPECT_GE(seconds, 0.25);
  EXPECT_LT(seconds, 0.8);               // well before the 2 s I/O timeout
  EXPECT_GE(interrupt_calls.load(), 3);  // checked every 100 ms while waiting
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 2u);
  EXPECT_EQ(batch.results[0].error, "interrupted");
  EXPECT_EQ(sink->State(), "idle");

  // Interrupted before anything was sent: no connection is even attempted.
  interrupt_now = true;
  Batch other;
  other.Add("never", "k", "1");
  other.Publish(sink.get(), InterruptFlag);
  EXPECT_EQ(other.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_EQ(other.results[0].error, "interrupted");
  Client client(server.port());
  EXPECT_EQ(client.Integer({"EXISTS", "never"}), 0);

  interrupt_now = false;
  batch.Publish(sink.get(), InterruptFlag);
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.results[0].error;
}

TEST(RedisSink, PasswordAndDbAreUsed) {
  const std::string password = "s3cret-Pa55word";
  RedisServer server({"--requirepass", password});
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("password", password), Opt("db", "3")});
  Batch batch;
  batch.Add("in-db-3", "k", "1");
  batch.Publish(sink.get());
  ASSERT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  EXPECT_TRUE(Contains(AllLogs(sink.get()), " db 3"));

  Client db3(server.port(), password, 3);
  EXPECT_EQ(db3.Integer({"XLEN", "in-db-3"}), 1);
  Client db0(server.port(), password, 0);
  EXPECT_EQ(db0.Integer({"DBSIZE"}), 0);
  // The sink names its connection.
  EXPECT_TRUE(Contains(db0.String({"CLIENT", "LIST"}), "name=outbox-test"));
}

TEST(RedisSink, WrongOrMissingPasswordIsRetriableAndNeverShown) {
  const std::string password = "s3cret-Pa55word";
  RedisServer server({"--requirepass", password});
  REQUIRE_SERVER(server);

  const std::string wrong = "wrong-Pa55word";
  std::unique_ptr<Sink> sink = MakeSink(server.port(), {Opt("password", wrong)});
  Batch batch;
  batch.Add("s", "k", "1").Add("s", "k", "2");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 2u);
  EXPECT_TRUE(Contains(batch.results[0].error, "authentication failed"));
  EXPECT_TRUE(Contains(batch.results[0].error, "WRONGPASS"));
  EXPECT_EQ(sink->State(), "down");
  const std::string logs = AllLogs(sink.get());
  EXPECT_TRUE(Contains(logs, "WRONGPASS"));
  for (const std::string &secret : {password, wrong}) {
    EXPECT_EQ(logs.find(secret), std::string::npos);
    for (const Delivery &d : batch.results) EXPECT_EQ(d.error.find(secret), std::string::npos);
  }

  std::unique_ptr<Sink> no_password = MakeSink(server.port());
  batch.Publish(no_password.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kRetriable), 2u);
  EXPECT_TRUE(Contains(batch.results[0].error, "NOAUTH"));

  Client client(server.port(), password);
  EXPECT_EQ(client.Integer({"DBSIZE"}), 0);
}

TEST(RedisSink, ConnectionClosedMidBatchKeepsEarlierOutcomes) {
  // Redis answers an argument over proto-max-bulk-len with a protocol error
  // and closes the connection while we are still sending: the message before
  // it was delivered, the big one is refused, the one after it is unknown.
  // Writing into the closed connection raises SIGPIPE, which must not end
  // this process (the test does not ignore SIGPIPE).
  RedisServer server({"--proto-max-bulk-len", "1mb"});
  REQUIRE_SERVER(server);
  std::unique_ptr<Sink> sink = MakeSink(server.port());
  Batch batch;
  batch.Add("s", "k1", "1");
  batch.Add("s", "k2", "\"" + std::string(4 << 20, 'x') + "\"");
  batch.Add("s", "k3", "3");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  EXPECT_EQ(batch.results[1].status, DeliveryStatus::kRejected) << batch.results[1].error;
  EXPECT_TRUE(Contains(batch.results[1].error, "Protocol error"));
  EXPECT_EQ(batch.results[2].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[2].error, "lost"));

  Batch next;
  next.Add("s", "k", "4");
  next.Publish(sink.get());
  EXPECT_EQ(next.results[0].status, DeliveryStatus::kDelivered) << next.results[0].error;
}

TEST(RedisSinkErrors, RefusalsOfTheCommandRejectStatesOfTheServerRetry) {
  struct Case {
    const char *reply;
    DeliveryStatus status;
    bool drops_connection;
  };
  const Case cases[] = {
      {"WRONGTYPE Operation against a key holding the wrong kind of value",
       DeliveryStatus::kRejected, false},
      {"NOPERM this user has no permissions to access one of the keys used as arguments",
       DeliveryStatus::kRejected, false},
      {"ERR syntax error", DeliveryStatus::kRejected, false},
      {"ERR Protocol error: invalid bulk length", DeliveryStatus::kRejected, false},
      {"ERR unknown command 'XADD', with args beginning with: ", DeliveryStatus::kRetriable, false},
      {"ERR max number of clients reached", DeliveryStatus::kRetriable, false},
      {"OOM command not allowed when used memory > 'maxmemory'.", DeliveryStatus::kRetriable,
       false},
      {"LOADING Redis is loading the dataset in memory", DeliveryStatus::kRetriable, false},
      {"BUSY Redis is busy running a script.", DeliveryStatus::kRetriable, false},
      {"MISCONF Redis is configured to save RDB snapshots", DeliveryStatus::kRetriable, false},
      {"TRYAGAIN Multiple keys request during rehashing of slot", DeliveryStatus::kRetriable,
       false},
      {"CLUSTERDOWN The cluster is down", DeliveryStatus::kRetriable, false},
      {"NOREPLICAS Not enough good replicas to write.", DeliveryStatus::kRetriable, false},
      {"READONLY You can't write against a read only replica.", DeliveryStatus::kRetriable, true},
      {"MASTERDOWN Link with MASTER is down", DeliveryStatus::kRetriable, true},
      {"NOAUTH Authentication required.", DeliveryStatus::kRetriable, true},
      {"WRONGPASS invalid username-password pair", DeliveryStatus::kRetriable, true},
      {"MOVED 3999 127.0.0.1:6381", DeliveryStatus::kRetriable, true},
      {"ASK 3999 127.0.0.1:6381", DeliveryStatus::kRetriable, true},
      {"SOMEFUTURECODE whatever", DeliveryStatus::kRetriable, false},
      {"", DeliveryStatus::kRetriable, false},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(ClassifyRedisError(c.reply), c.status) << c.reply;
    EXPECT_EQ(RedisErrorConcernsConnection(c.reply), c.drops_connection) << c.reply;
  }
}

}  // namespace
}  // namespace outbox
