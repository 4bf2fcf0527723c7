// The HTTP sink's options, URL template and targets as tables: every option
// with good and bad values, unknown options named, secrets never quoted,
// only http and https, {target} only in the path and percent-encoded, and
// which targets and headers may travel.
#include "sinks/http_options.hpp"
#include "test_support.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

namespace outbox {
namespace {

using namespace test_support;

const char *const kSecret = "whsec_AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=";

std::string ErrorOf(const SinkOptions &options) {
  std::optional<std::string> error = ValidateHttpOptions(options);
  return error ? *error : std::string();
}

TEST(HttpOptions, OnlyTheUrlIsRequiredAndTheDefaultsAreSafe) {
  EXPECT_NE(ErrorOf({}).find("option \"url\" is required"), std::string::npos);
  HttpOptions o;
  ASSERT_EQ(ParseHttpOptions({Opt("url", "HTTPS://hooks.example:8443/in")}, &o), std::nullopt);
  EXPECT_EQ(o.url, "https://hooks.example:8443/in");
  EXPECT_FALSE(o.url_has_target);
  EXPECT_TRUE(o.tls_verify);
  EXPECT_FALSE(o.follow_redirects);
  EXPECT_FALSE(o.secret);
  EXPECT_EQ(o.timeout_ms, 10000);
  EXPECT_EQ(o.connect_timeout_ms, 5000);
  EXPECT_EQ(o.max_connections, 16);
  EXPECT_EQ(o.cloudevents_mode, CloudEventsMode::kBinary);
}

TEST(HttpOptions, EveryOptionTakesItsValues) {
  HttpOptions o;
  ASSERT_EQ(
      ParseHttpOptions(
          {Opt("url", "http://[::1]:42001/hooks/{target}?v=1"), Opt("method", "POST"),
           Opt("headers", "X-Team: orders\nX-Empty:\n"), Opt("timeout_ms", "2500"),
           SinkOption{"connect_timeout_ms", SinkOption::Kind::kNumber, "700.0"},
           Opt("max_connections", "4"), Opt("follow_redirects", "true"), Opt("secret", kSecret),
           Opt("format", "structured"), Opt("tls_ca", "-----BEGIN CERTIFICATE-----\nAA==\n")},
          &o),
      std::nullopt);
  EXPECT_TRUE(o.url_has_target);
  ASSERT_EQ(o.headers.size(), 2u);
  EXPECT_EQ(o.headers[0].first, "X-Team");
  EXPECT_EQ(o.headers[0].second, "orders");
  EXPECT_EQ(o.headers[1].second, "");
  EXPECT_EQ(o.timeout_ms, 2500);
  EXPECT_EQ(o.connect_timeout_ms, 700);
  EXPECT_EQ(o.max_connections, 4);
  EXPECT_TRUE(o.follow_redirects);
  ASSERT_TRUE(o.secret);
  EXPECT_EQ(o.secret->size(), 32u);
  EXPECT_EQ((*o.secret)[0], '\x01');
  EXPECT_EQ(o.cloudevents_mode, CloudEventsMode::kStructured);
  EXPECT_TRUE(o.tls_ca);
}

TEST(HttpOptions, BadValuesAreRefusedNamingTheirOption) {
  const std::string url = "http://h/";
  const struct {
    SinkOption option;
    const char *named;
  } cases[] = {
      {Opt("url", "file:///etc/passwd"), "option \"url\" must start with http:// or https://"},
      {Opt("url", "gopher://h/"), "option \"url\" must start with http"},
      {Opt("url", "ftp://h/"), "option \"url\" must start with http"},
      {Opt("url", "http://user:pw@h/"), "option \"url\" must not hold credentials"},
      {Opt("url", "http://h/a b"), "option \"url\" must be printable ASCII"},
      {Opt("url", "http://h/\r\nX: y"), "option \"url\" must be printable ASCII"},
      {Opt("url", "http://{target}/"), "option \"url\" has a host"},
      {Opt("url", "http://h/?t={target}"), "only in its path"},
      {Opt("url", "http://h/{topic}"), "does not begin {target}"},
      {Opt("url", "http://h/#x"), "fragment"},
      // A '%' left open would take {target}'s first bytes as its digits.
      {Opt("url", "http://h/a/%2{target}"), "'%' that is not followed by two hex digits"},
      {Opt("url", "http://h/a/%{target}"), "'%' that is not followed by two hex digits"},
      {Opt("url", "http://h/a%"), "'%' that is not followed by two hex digits"},
      {Opt("url", "http://h/a?q=%zz"), "'%' that is not followed by two hex digits"},
      {Opt("url", "http://h:0/"), "port"},
      {Opt("url", "http://h:70000/"), "port"},
      {Opt("url", "http:///x"), "no host"},
      {Opt("method", "GET"), "option \"method\" must be \"POST\""},
      {Opt("headers", "Host: evil"), "must not set header Host"},
      {Opt("headers", "content-length: 1"), "must not set header"},
      {Opt("headers", "Transfer-Encoding: chunked"), "must not set header"},
      {Opt("headers", "webhook-signature: v1,forged"), "must not set header"},
      {Opt("headers", "ce-id: x"), "must not set header"},
      {Opt("headers", "Outbox-Id: x"), "must not set header"},
      {Opt("headers", "Bad Name: x"), "each name an HTTP token"},
      {Opt("headers", "X: a\rb"), "CR, LF or NUL"},
      {Opt("headers", std::string("X: a\0b", 6)), "CR, LF or NUL"},
      {Opt("timeout_ms", "99"), "option \"timeout_ms\" must be an integer between 100"},
      {Opt("timeout_ms", "-5"), "option \"timeout_ms\""},
      {Opt("connect_timeout_ms", "60001"), "option \"connect_timeout_ms\""},
      {Opt("max_connections", "0"), "option \"max_connections\""},
      {Opt("max_connections", "257"), "option \"max_connections\""},
      {Opt("tls_verify", "yes"), "option \"tls_verify\" must be \"true\" or \"false\""},
      {Opt("follow_redirects", "1"), "option \"follow_redirects\""},
      {Opt("tls_ca", "/etc/ssl/certs/ca.pem"), "option \"tls_ca\" must be PEM text"},
      {Opt("secret", "c2VjcmV0"), "option \"secret\" must be \"whsec_\""},
      {Opt("secret", "whsec_c2VjcmV0"), "option \"secret\" must be"},  // too short
      {Opt("secret", "whsec_!!!!"), "option \"secret\" must be"},
      {Opt("format", "json"), "option \"format\" must be \"binary\" or \"structured\""},
      {Opt("proxy", "http://p/"), "unknown option \"proxy\" (valid: url, method"},
      {SinkOption{"headers", SinkOption::Kind::kOther, ""}, "option \"headers\" must be a JSON"},
      {SinkOption{"url", SinkOption::Kind::kNumber, "1"}, "option \"url\" must be a JSON string"},
  };
  for (const auto &c : cases) {
    SinkOptions options{Opt("url", url), c.option};
    const std::string error = ErrorOf(options);
    EXPECT_NE(error.find(c.named), std::string::npos)
        << c.option.key << "=" << c.option.text << " -> " << error;
  }
}

TEST(HttpOptions, SecretsAreNeverQuoted) {
  const std::string secret = "whsec_bm90IGxvbmcgZW5vdWdo";
  const std::string error = ErrorOf({Opt("url", "http://h/"), Opt("secret", secret)});
  EXPECT_FALSE(error.empty());
  EXPECT_EQ(error.find("bm90IGxvbmcgZW5vdWdo"), std::string::npos);
}

TEST(HttpOptions, TlsCaNeedsVerification) {
  EXPECT_NE(ErrorOf({Opt("url", "https://h/"), Opt("tls_verify", "false"),
                     Opt("tls_ca", "-----BEGIN CERTIFICATE-----\n")})
                .find("tls_ca"),
            std::string::npos);
}

TEST(HttpTargets, SegmentsWithoutDotsOrControlCharactersMayBeTargets) {
  for (const char *good :
       {"orders", "a/b", "caf\xc3\xa9", "with space", "%2e%2e", "a.b", "...", "?x#y"}) {
    EXPECT_EQ(CheckHttpTarget(good), std::nullopt) << good;
  }
  for (const char *bad :
       {"", ".", "..", "a/../b", "a/./b", "/a", "a/", "a//b", "a\r\nb", "tab\t"}) {
    EXPECT_NE(CheckHttpTarget(bad), std::nullopt) << bad;
  }
  EXPECT_NE(CheckHttpTarget(std::string(kHttpMaxTargetBytes + 1, 'a')), std::nullopt);
}

TEST(HttpTargets, TheTargetIsPercentEncodedIntoEveryMarkOfThePath) {
  HttpOptions o;
  ASSERT_EQ(ParseHttpOptions({Opt("url", "https://h/{target}/x/{target}?q=1")}, &o), std::nullopt);
  EXPECT_EQ(ExpandHttpUrl(o, "a b/c?d#e%f"),
            "https://h/a%20b/c%3Fd%23e%25f/x/a%20b/c%3Fd%23e%25f?q=1");
  EXPECT_EQ(ExpandHttpUrl(o, "caf\xc3\xa9"), "https://h/caf%C3%A9/x/caf%C3%A9?q=1");
  ASSERT_EQ(ParseHttpOptions({Opt("url", "https://h/in")}, &o), std::nullopt);
  EXPECT_EQ(ExpandHttpUrl(o, "ignored"), "https://h/in");
}

TEST(HttpHeaders, TokensReservedNamesAndValues) {
  for (const char *name : {"X-Team", "x_y", "a!#$%&'*+-.^_`|~9"}) EXPECT_TRUE(IsHttpToken(name));
  for (const char *name : {"", "a b", "a:b", "a\r", "caf\xc3\xa9", "(x)"}) {
    EXPECT_FALSE(IsHttpToken(name)) << name;
  }
  for (const char *name :
       {"Host", "CONTENT-LENGTH", "Content-Type", "transfer-encoding", "Connection", "Webhook-Id",
        "webhook-anything", "CE-ID", "ce-x", "outbox-key", "Outbox-Anything", "Upgrade", "TE"}) {
    EXPECT_TRUE(IsReservedHttpHeader(name)) << name;
  }
  for (const char *name : {"webhook_signature", "Webhook_Id", "ce_id", "outbox_id", "OUTBOX_KEY"}) {
    EXPECT_TRUE(IsReservedHttpHeader(name)) << name << ": CGI-style receivers read _ as -";
  }
  for (const char *name : {"X-Host", "webhook", "cex", "outbox", "Authorization", "traceparent"}) {
    EXPECT_FALSE(IsReservedHttpHeader(name)) << name;
  }
  // The sink owner's to send (option headers), never an event's.
  for (const char *name :
       {"Authorization", "cookie", "User-Agent", "Origin", "Referer", "Forwarded",
        "X-Forwarded-For", "x_forwarded_host", "X-Real-IP", "X-HTTP-Method-Override",
        "x-http-method", "X-Method-Override", "Proxy-Anything"}) {
    EXPECT_TRUE(IsOwnerOnlyHttpHeader(name)) << name;
  }
  for (const char *name : {"X-Team", "traceparent", "X-Request-Id", "Accept-Language"}) {
    EXPECT_FALSE(IsOwnerOnlyHttpHeader(name)) << name;
  }
  EXPECT_TRUE(IsHttpHeaderValue("any \xff bytes"));
  EXPECT_FALSE(IsHttpHeaderValue("a\rb"));
  EXPECT_FALSE(IsHttpHeaderValue("a\nb"));
  EXPECT_FALSE(IsHttpHeaderValue(std::string("a\0b", 3)));
}

}  // namespace
}  // namespace outbox
