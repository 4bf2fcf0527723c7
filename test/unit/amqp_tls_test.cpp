// The AMQP sink over TLS (amqps) against the shared node's TLS listener,
// whose certificate a test authority made for "localhost": verified
// against the authority given inline, refused when it cannot be verified
// (verification is on by default), and connected without verification
// only when told so.
#include "sinks/amqp_sink.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "amqp_batch.hpp"
#include "amqp_node.hpp"
#include "amqp_test_client.hpp"
#include "test_support.hpp"

namespace outbox {
namespace {

using namespace amqp_test;
using test_support::Contains;
using test_support::Opt;

class AmqpSinkTls : public ::testing::Test {
 protected:
  void SetUp() override {
    const SharedNodeInfo &node = SharedRabbitNode();
    ASSERT_TRUE(node.ok) << "RabbitMQ did not start: " << node.error;
    if (node.ports.amqps == 0) GTEST_SKIP() << "no TLS listener (the openssl command is missing)";
    port_ = node.ports.amqp;
    tls_port_ = node.ports.amqps;
    ca_ = node.ca_pem;
    queue_ = "amqp-unit-tls-" + std::to_string(getpid());
    Client client(port_);
    ASSERT_TRUE(client.ok() && client.DeclareQueue(queue_)) << client.error();
  }

  std::unique_ptr<Sink> TlsSink(std::vector<SinkOption> more) {
    std::vector<SinkOption> options = {Opt("host", "localhost"),
                                       Opt("port", std::to_string(tls_port_)), Opt("tls", "true")};
    options.insert(options.end(), more.begin(), more.end());
    std::string error;
    std::unique_ptr<Sink> sink = MakeAmqpSink("tls", options, &error);
    EXPECT_NE(sink, nullptr) << error;
    return sink;
  }

  int port_ = 0;
  int tls_port_ = 0;
  std::string ca_;
  std::string queue_;
};

TEST_F(AmqpSinkTls, VerifiedAgainstTheAuthorityGivenInline) {
  std::unique_ptr<Sink> sink = TlsSink({Opt("tls_ca", ca_)});
  Batch batch;
  batch.Add(queue_, "k", "1").Add(queue_, std::nullopt, "2");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.Count(DeliveryStatus::kDelivered), 2u)
      << batch.FirstOther(DeliveryStatus::kDelivered);
  EXPECT_EQ(sink->State(), "connected");
  Client client(port_);
  EXPECT_EQ(client.Count(queue_), 2);
  ASSERT_TRUE(client.Purge(queue_));
}

TEST_F(AmqpSinkTls, AServerItCannotVerifyIsRefused) {
  // The test authority is in no system store.
  std::unique_ptr<Sink> sink = TlsSink({});
  Batch batch;
  batch.Add(queue_, "k", "1");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "cannot connect to localhost:"));
  EXPECT_TRUE(Contains(batch.results[0].error, "verif")) << batch.results[0].error;
  EXPECT_EQ(sink->State(), "down");
  // Nor does a certificate for another name pass, whoever signed it.
  std::unique_ptr<Sink> other_name = TlsSink({Opt("tls_ca", ca_), Opt("host", "127.0.0.1")});
  batch.Publish(other_name.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kRetriable);
  EXPECT_TRUE(Contains(batch.results[0].error, "hostname")) << batch.results[0].error;
  Client client(port_);
  EXPECT_EQ(client.Count(queue_), 0);
}

TEST_F(AmqpSinkTls, WithoutVerificationOnlyWhenToldSo) {
  std::unique_ptr<Sink> sink = TlsSink({Opt("tls_verify", "false")});
  Batch batch;
  batch.Add(queue_, "k", "1");
  batch.Publish(sink.get());
  EXPECT_EQ(batch.results[0].status, DeliveryStatus::kDelivered) << batch.results[0].error;
  Client client(port_);
  EXPECT_EQ(client.Count(queue_), 1);
  ASSERT_TRUE(client.Purge(queue_));
}

}  // namespace
}  // namespace outbox
