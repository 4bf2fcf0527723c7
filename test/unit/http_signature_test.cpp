// Standard Webhooks signatures against vectors computed independently, and
// the base64 they are written in.
#include "sinks/http_signature.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace outbox {
namespace {

// The example of the Standard Webhooks specification (its secret, message
// id, timestamp and body give this signature); recomputed with python3:
//   base64.b64encode(hmac.new(base64.b64decode('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'),
//     b'msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{"test": 2432232314}',
//     hashlib.sha256).digest())
TEST(WebhookSignature, TheSpecificationsExampleSignsAsItSays) {
  const std::optional<std::string> key =
      DecodeWebhookSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
  ASSERT_TRUE(key);
  EXPECT_EQ(
      WebhookSignature(*key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, "{\"test\": 2432232314}"),
      "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
}

// An event id, a UTF-8 body and a 32-byte key 0x01..0x20; with python3:
//   key = bytes(range(1, 33))
//   base64.b64encode(hmac.new(key, b'01890a5d-ac96-774b-bcce-b302099a8057.1764208800.'
//     + '{"order":42,"note":"café"}'.encode(), hashlib.sha256).digest())
TEST(WebhookSignature, AnEventsIdTimestampAndBodyAreSigned) {
  const std::optional<std::string> key =
      DecodeWebhookSecret("whsec_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=");
  ASSERT_TRUE(key);
  ASSERT_EQ(key->size(), 32u);
  EXPECT_EQ(WebhookSignature(*key, "01890a5d-ac96-774b-bcce-b302099a8057", 1764208800,
                             "{\"order\":42,\"note\":\"caf\xc3\xa9\"}"),
            "v1,Rx2GYydfJj6Ohsc8Ck+LZ31Sg+hK/K8/v2FXafGrHZo=");
  // Any change of id, time or body changes it.
  EXPECT_NE(WebhookSignature(*key, "01890a5d-ac96-774b-bcce-b302099a8057", 1764208801,
                             "{\"order\":42,\"note\":\"caf\xc3\xa9\"}"),
            "v1,Rx2GYydfJj6Ohsc8Ck+LZ31Sg+hK/K8/v2FXafGrHZo=");
}

TEST(WebhookSignature, Base64RoundTripsAndRefusesWhatIsNotCanonical) {
  for (const std::string &bytes :
       {std::string(), std::string("f"), std::string("fo"), std::string("foo"), std::string("foob"),
        std::string("\x00\xff\x10", 3)}) {
    const std::optional<std::string> back = DecodeBase64(EncodeBase64(bytes));
    ASSERT_TRUE(back) << bytes;
    EXPECT_EQ(*back, bytes);
  }
  EXPECT_EQ(EncodeBase64("foobar"), "Zm9vYmFy");
  EXPECT_EQ(EncodeBase64("fo"), "Zm8=");
  for (const char *bad : {"Zm9", "Zm9v=", "Zm==Zm9v", "Zm9=", "Z===", "Zh==", "Zm8!", "Zm 9v"}) {
    EXPECT_FALSE(DecodeBase64(bad)) << bad;
  }
  EXPECT_FALSE(DecodeWebhookSecret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
  EXPECT_FALSE(DecodeWebhookSecret("whsec-MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"));
}

}  // namespace
}  // namespace outbox
