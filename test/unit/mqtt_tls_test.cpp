// The MQTT sink over TLS, against a mosquitto TLS listener whose
// certificate a test authority signed: verified against the authority given
// inline (PEM text, written to a private file only while connecting), a
// broker it cannot verify refused, and no verification only when asked.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "mqtt_broker.hpp"
#include "sink_batch.hpp"
#include "sinks/mqtt_sink.hpp"
#include "test_support.hpp"

namespace outbox {
namespace {

using mqtt_test::Broker;
using test_support::Batch;
using test_support::Contains;
using test_support::Opt;

class MqttSinkTls : public ::testing::Test {
 protected:
  static Broker &TlsBroker() {
    static Broker broker(true);
    return broker;
  }
  void SetUp() override {
    Broker &broker = TlsBroker();
    MQTT_REQUIRE_BROKER(broker);
    if (broker.tls_port() == 0) GTEST_SKIP() << "no TLS listener (the openssl command is missing)";
    std::ifstream in(broker.dir() + "/ca.pem");
    std::stringstream text;
    text << in.rdbuf();
    ca_ = text.str();
  }
  std::unique_ptr<Sink> TlsSink(SinkOptions more) {
    SinkOptions options = {Opt("host", "localhost"),
                           Opt("port", std::to_string(TlsBroker().tls_port())), Opt("tls", "true"),
                           Opt("connect_timeout_ms", "3000")};
    for (SinkOption &o : more) options.push_back(std::move(o));
    std::string error;
    std::unique_ptr<Sink> sink = MakeMqttSink("tls", options, &error);
    EXPECT_NE(sink, nullptr) << error;
    return sink;
  }
  std::string ca_;
};

TEST_F(MqttSinkTls, VerifiedAgainstTheAuthorityGivenInline) {
  // The authority's text goes through a file of the sink's in TMPDIR, gone
  // once the connection is made.
  const std::string tmp = TlsBroker().dir() + "/tmp";
  std::filesystem::create_directory(tmp);
  const char *old = getenv("TMPDIR");
  const std::string saved = old != nullptr ? old : "";
  setenv("TMPDIR", tmp.c_str(), 1);
  std::unique_ptr<Sink> sink = TlsSink({Opt("tls_ca", ca_)});
  Batch batch;
  batch.Add("t/tls", "k", "1").Add("t/tls", std::nullopt, "2");
  batch.Publish(sink.get());
  if (old != nullptr) {
    setenv("TMPDIR", saved.c_str(), 1);
  } else {
    unsetenv("TMPDIR");
  }
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u) << batch.Errors();
  EXPECT_EQ(sink->State(), "connected");
  EXPECT_TRUE(std::filesystem::is_empty(tmp)) << "the authority's file was left behind";
}

TEST_F(MqttSinkTls, ABrokerItCannotVerifyIsRefused) {
  // The test authority is in no system store.
  std::unique_ptr<Sink> sink = TlsSink({});
  Batch batch;
  batch.Add("t/tls", "k", "1");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "mqtts://localhost:"));
  EXPECT_EQ(sink->State(), "down");
}

TEST_F(MqttSinkTls, WithoutVerificationOnlyWhenToldSo) {
  std::unique_ptr<Sink> sink = TlsSink({Opt("tls_verify", "false")});
  Batch batch;
  batch.Add("t/tls", "k", "1");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
}

}  // namespace
}  // namespace outbox
