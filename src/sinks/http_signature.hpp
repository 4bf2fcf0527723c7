// Standard Webhooks signatures (https://www.standardwebhooks.com/): the
// secret's form, and the signature of one request. PostgreSQL-free and
// libcurl-free; HMAC-SHA256 comes from OpenSSL's libcrypto. Tested against a
// vector computed independently (test/unit/http_signature_test.cpp) and by
// the npm standardwebhooks package in TAP 140.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace outbox {

// Base64 with the standard alphabet and '=' padding.
std::string EncodeBase64(std::string_view bytes);
// Nothing when `text` is not canonical padded base64.
std::optional<std::string> DecodeBase64(std::string_view text);

// The key bytes of a secret written "whsec_<base64>"; nothing when it is
// not of that form.
std::optional<std::string> DecodeWebhookSecret(std::string_view text);

// The webhook-signature header's value: "v1," and the base64 of
// HMAC-SHA256(key, id "." timestamp "." body), timestamp in seconds since
// the Unix epoch, as webhook-timestamp carries it. Empty when libcrypto
// fails (out of memory).
std::string WebhookSignature(std::string_view key, std::string_view id, int64_t timestamp_s,
                             std::string_view body);

}  // namespace outbox
