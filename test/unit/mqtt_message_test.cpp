// What an MQTT message of the sink holds, per protocol and format, and how
// the broker's reason codes are judged, as tables.
#include "sinks/mqtt_message.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace outbox {
namespace {

OutMessage Event(const Header *headers, size_t count, MessageFormat format) {
  OutMessage m;
  m.id = "0190f5f0-0000-7000-8000-000000000001";
  m.topic = "orders.created";
  m.target = "t/orders";
  m.has_key = true;
  m.key = "k1";
  m.payload = R"({"n":1})";
  m.headers = headers;
  m.header_count = count;
  m.headers_json = count == 0 ? "{}" : R"({"trace":"abc"})";
  m.format = format;
  m.created_at = 831648000000000;  // 2026-05-09T13:20:00Z
  m.source = "/outbox/test";
  return m;
}

std::vector<std::pair<std::string, std::string>> Pairs(const MqttMessage &msg) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const Header &h : msg.properties) pairs.emplace_back(h.name, h.value);
  return pairs;
}

TEST(MqttMessage, RawOnMqtt5IsThePayloadWithUserProperties) {
  const Header headers[] = {{"trace", "abc"}, {"outbox-id", "forged"}};
  const OutMessage m = Event(headers, 2, MessageFormat::kRaw);
  std::string scratch;
  MqttMessage msg;
  ASSERT_EQ(BuildMqttMessage(m, true, &scratch, &msg), std::nullopt);
  EXPECT_EQ(msg.body, R"({"n":1})");
  EXPECT_EQ(msg.content_type, "application/json");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"outbox-id", "0190f5f0-0000-7000-8000-000000000001"},
      {"outbox-topic", "orders.created"},
      {"outbox-key", "k1"},
      {"trace", "abc"}};  // a user header named like ours is not taken
  EXPECT_EQ(Pairs(msg), expected);
}

TEST(MqttMessage, CloudEventsOnMqtt5AreStructured) {
  const Header headers[] = {{"trace", "abc"}};
  const OutMessage m = Event(headers, 1, MessageFormat::kCloudEvents);
  std::string scratch;
  MqttMessage msg;
  ASSERT_EQ(BuildMqttMessage(m, true, &scratch, &msg), std::nullopt);
  EXPECT_EQ(msg.content_type, "application/cloudevents+json");
  EXPECT_EQ(
      msg.body,
      R"({"specversion":"1.0","id":"0190f5f0-0000-7000-8000-000000000001",)"
      R"("source":"/outbox/test","type":"orders.created","time":"2026-05-09T13:20:00.000000Z",)"
      R"("datacontenttype":"application/json","partitionkey":"k1","trace":"abc",)"
      R"("data":{"n":1}})");
  EXPECT_EQ(Pairs(msg).size(), 3u);  // outbox-id, outbox-topic, outbox-key
}

TEST(MqttMessage, Mqtt311CarriesEverythingInTheBody) {
  const Header headers[] = {{"trace", "abc"}};
  const OutMessage raw = Event(headers, 1, MessageFormat::kRaw);
  std::string scratch;
  MqttMessage msg;
  ASSERT_EQ(BuildMqttMessage(raw, false, &scratch, &msg), std::nullopt);
  EXPECT_EQ(msg.body, R"({"id":"0190f5f0-0000-7000-8000-000000000001","topic":"orders.created",)"
                      R"("key":"k1","payload":{"n":1},"headers":{"trace":"abc"}})");
  EXPECT_TRUE(msg.properties.empty());
  const OutMessage ce = Event(headers, 1, MessageFormat::kCloudEvents);
  ASSERT_EQ(BuildMqttMessage(ce, false, &scratch, &msg), std::nullopt);
  EXPECT_EQ(msg.body.substr(0, 23), R"({"specversion":"1.0","i)");
}

TEST(MqttMessage, WhatCannotTravelIsRefusedNamed) {
  std::string scratch;
  MqttMessage msg;
  const OutMessage debezium = Event(nullptr, 0, MessageFormat::kDebezium);
  ASSERT_TRUE(BuildMqttMessage(debezium, true, &scratch, &msg).has_value());
  for (const Header h :
       {Header{"bad\nname", "v"}, Header{"ok", "a\x01z"}, Header{"ok", "\xff"}, Header{"", "v"}}) {
    const OutMessage m = Event(&h, 1, MessageFormat::kRaw);
    const std::optional<std::string> why = BuildMqttMessage(m, true, &scratch, &msg);
    ASSERT_TRUE(why.has_value()) << h.name;
    EXPECT_NE(why->find("cannot travel as an MQTT 5 user property"), std::string::npos);
  }
  // MQTT 3.1.1 carries them escaped in JSON.
  const Header h{"bad\nname", "v"};
  EXPECT_EQ(BuildMqttMessage(Event(&h, 1, MessageFormat::kRaw), false, &scratch, &msg),
            std::nullopt);
}

TEST(MqttReasons, EachCodeHasItsOutcome) {
  struct Case {
    int code;
    DeliveryStatus status;
    const char *text;
  };
  for (const Case &c : std::vector<Case>{
           {0x00, DeliveryStatus::kDelivered, "0x00 success"},
           {0x10, DeliveryStatus::kDelivered, "0x10 no matching subscribers"},
           {0x80, DeliveryStatus::kRejected, "0x80 unspecified error"},
           {0x83, DeliveryStatus::kRejected, "0x83 implementation specific error"},
           {0x87, DeliveryStatus::kTargetRefused, "0x87 not authorized"},
           {0x90, DeliveryStatus::kTargetRefused, "0x90 topic name invalid"},
           {0x91, DeliveryStatus::kRetriable, "0x91 packet identifier in use"},
           {0x97, DeliveryStatus::kRetriable, "0x97 quota exceeded"},
           {0x99, DeliveryStatus::kRejected, "0x99 payload format invalid"},
           {0xa0, DeliveryStatus::kRejected, "0xa0 unknown reason"},
       }) {
    EXPECT_EQ(MqttReasonOutcome(c.code), c.status) << c.text;
    EXPECT_EQ(MqttReasonText(c.code), c.text);
  }
}

}  // namespace
}  // namespace outbox
