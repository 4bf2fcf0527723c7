#include "sinks/sink_options.hpp"
#include "sinks/kafka_config.hpp"

#include <librdkafka/rdkafka.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <memory>
#include <set>

namespace outbox {

namespace {

// The producer properties a sink may set: an
// allowlist, because librdkafka has properties that make the process run
// programs or read files, and more arrive with every release. Three kinds:
// - kAnyone: what a producer needs to reach and feed a cluster: the sink's
//   owner (a superuser or the extension owner) may set it;
// - kSuperuser: properties that make the server open a file of its choice
//   (ssl.*.location: an existence and readability oracle for any path the
//   server's OS user can read), fetch a URL (OIDC token endpoint) or run
//   Kerberos' kinit (librdkafka's default kinit command interpolates the
//   principal and keytab into /bin/sh): only when a superuser sets them;
// - anything else is refused, among them plugin.library.paths and
//   interceptors (load libraries), ssl.engine.location and ssl.providers
//   (load OpenSSL code), sasl.kerberos.kinit.cmd (a shell command),
//   transactional.id (the publisher never drives transactions) and
//   log.queue (the publisher serves librdkafka's log from its own thread).
enum class Allowed { kAnyone, kSuperuser };
struct AllowedProperty {
  const char *name;
  Allowed who;
};
constexpr AllowedProperty kAllowedProperties[] = {
    // Reaching the cluster.
    {"bootstrap.servers", Allowed::kAnyone},
    {"metadata.broker.list", Allowed::kAnyone},
    {"client.id", Allowed::kAnyone},
    {"client.rack", Allowed::kAnyone},
    {"client.dns.lookup", Allowed::kAnyone},
    {"broker.address.family", Allowed::kAnyone},
    {"broker.address.ttl", Allowed::kAnyone},
    {"broker.version.fallback", Allowed::kAnyone},
    {"api.version.request", Allowed::kAnyone},
    {"api.version.request.timeout.ms", Allowed::kAnyone},
    {"api.version.fallback.ms", Allowed::kAnyone},
    {"socket.timeout.ms", Allowed::kAnyone},
    {"socket.connection.setup.timeout.ms", Allowed::kAnyone},
    {"socket.keepalive.enable", Allowed::kAnyone},
    {"socket.nagle.disable", Allowed::kAnyone},
    {"socket.send.buffer.bytes", Allowed::kAnyone},
    {"socket.receive.buffer.bytes", Allowed::kAnyone},
    {"socket.max.fails", Allowed::kAnyone},
    {"connections.max.idle.ms", Allowed::kAnyone},
    {"reconnect.backoff.ms", Allowed::kAnyone},
    {"reconnect.backoff.max.ms", Allowed::kAnyone},
    {"topic.metadata.refresh.interval.ms", Allowed::kAnyone},
    {"topic.metadata.refresh.fast.interval.ms", Allowed::kAnyone},
    {"topic.metadata.refresh.sparse", Allowed::kAnyone},
    {"topic.metadata.propagation.max.ms", Allowed::kAnyone},
    {"metadata.max.age.ms", Allowed::kAnyone},
    {"log.connection.close", Allowed::kAnyone},
    // Producing.
    {"acks", Allowed::kAnyone},
    {"request.required.acks", Allowed::kAnyone},
    {"enable.idempotence", Allowed::kAnyone},
    {"enable.gapless.guarantee", Allowed::kAnyone},
    {"compression.type", Allowed::kAnyone},
    {"compression.codec", Allowed::kAnyone},
    {"compression.level", Allowed::kAnyone},
    {"linger.ms", Allowed::kAnyone},
    {"queue.buffering.max.ms", Allowed::kAnyone},
    {"queue.buffering.max.messages", Allowed::kAnyone},
    {"queue.buffering.max.kbytes", Allowed::kAnyone},
    {"queue.buffering.backpressure.threshold", Allowed::kAnyone},
    {"batch.size", Allowed::kAnyone},
    {"batch.num.messages", Allowed::kAnyone},
    {"message.max.bytes", Allowed::kAnyone},
    {"message.copy.max.bytes", Allowed::kAnyone},
    {"receive.message.max.bytes", Allowed::kAnyone},
    {"message.timeout.ms", Allowed::kAnyone},
    {"delivery.timeout.ms", Allowed::kAnyone},
    {"request.timeout.ms", Allowed::kAnyone},
    {"max.in.flight.requests.per.connection", Allowed::kAnyone},
    {"max.in.flight", Allowed::kAnyone},
    {"retries", Allowed::kAnyone},
    {"message.send.max.retries", Allowed::kAnyone},
    {"retry.backoff.ms", Allowed::kAnyone},
    {"retry.backoff.max.ms", Allowed::kAnyone},
    {"partitioner", Allowed::kAnyone},
    {"sticky.partitioning.linger.ms", Allowed::kAnyone},
    // Security with values given inline.
    {"security.protocol", Allowed::kAnyone},
    {"sasl.mechanisms", Allowed::kAnyone},
    {"sasl.mechanism", Allowed::kAnyone},
    {"sasl.username", Allowed::kAnyone},
    {"sasl.password", Allowed::kAnyone},
    {"sasl.oauthbearer.config", Allowed::kAnyone},
    {"enable.sasl.oauthbearer.unsecure.jwt", Allowed::kAnyone},
    {"ssl.ca.pem", Allowed::kAnyone},
    {"ssl.certificate.pem", Allowed::kAnyone},
    {"ssl.key.pem", Allowed::kAnyone},
    {"ssl.key.password", Allowed::kAnyone},
    {"ssl.cipher.suites", Allowed::kAnyone},
    {"ssl.curves.list", Allowed::kAnyone},
    {"ssl.sigalgs.list", Allowed::kAnyone},
    {"ssl.endpoint.identification.algorithm", Allowed::kAnyone},
    {"enable.ssl.certificate.verification", Allowed::kAnyone},
    // Files, URLs and Kerberos: a superuser's.
    {"ssl.ca.location", Allowed::kSuperuser},
    {"ssl.ca.certificate.stores", Allowed::kSuperuser},
    {"ssl.certificate.location", Allowed::kSuperuser},
    {"ssl.key.location", Allowed::kSuperuser},
    {"ssl.keystore.location", Allowed::kSuperuser},
    {"ssl.keystore.password", Allowed::kSuperuser},
    {"ssl.crl.location", Allowed::kSuperuser},
    {"sasl.kerberos.service.name", Allowed::kSuperuser},
    {"sasl.kerberos.principal", Allowed::kSuperuser},
    {"sasl.kerberos.keytab", Allowed::kSuperuser},
    {"sasl.kerberos.min.time.before.relogin", Allowed::kSuperuser},
    {"sasl.oauthbearer.method", Allowed::kSuperuser},
    {"sasl.oauthbearer.client.id", Allowed::kSuperuser},
    {"sasl.oauthbearer.client.secret", Allowed::kSuperuser},
    {"sasl.oauthbearer.scope", Allowed::kSuperuser},
    {"sasl.oauthbearer.extensions", Allowed::kSuperuser},
    {"sasl.oauthbearer.token.endpoint.url", Allowed::kSuperuser},
    {"debug", Allowed::kSuperuser},
};

const AllowedProperty *FindAllowed(std::string_view key) {
  for (const AllowedProperty &p : kAllowedProperties) {
    if (key == p.name) return &p;
  }
  return nullptr;
}

std::optional<int64_t> ParseInteger(const SinkOption &opt) {
  if (opt.kind == SinkOption::Kind::kOther || opt.text.empty()) return std::nullopt;
  errno = 0;
  char *end = nullptr;
  const long long v = std::strtoll(opt.text.c_str(), &end, 10);
  if (errno != 0 || end == nullptr) return std::nullopt;
  // A JSON number keeps the scale it was written with (6379.0): an integral
  // one is that integer. A string must be plain decimal digits.
  if (opt.kind == SinkOption::Kind::kNumber && *end == '.' && end[1] != '\0') {
    ++end;
    while (*end == '0') ++end;
  }
  if (*end != '\0') return std::nullopt;
  // strtoll skips leading white space and accepts '+': keep the text strict.
  const char first = opt.text[0];
  if (!(first == '-' || (first >= '0' && first <= '9'))) return std::nullopt;
  return static_cast<int64_t>(v);
}

}  // namespace

// Whether this librdkafka knows a property, from its own list of them
// (rd_kafka_conf_properties_show, read once): asking with rd_kafka_conf_set
// would act on it, and rd_kafka_conf_get does not know every property
// (plugin.library.paths, interceptors).
bool KnownToLibrdkafka(std::string_view key) {
  static const std::set<std::string, std::less<>> known = [] {
    std::set<std::string, std::less<>> names;
    char *text = nullptr;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    if (out == nullptr) return names;
    rd_kafka_conf_properties_show(out);
    fclose(out);
    // Table rows: "name | C/P | range | default | importance | description".
    const std::string_view all(text, size);
    for (size_t at = 0; at < all.size();) {
      size_t end = all.find('\n', at);
      if (end == std::string_view::npos) end = all.size();
      const std::string_view line = all.substr(at, end - at);
      at = end + 1;
      const size_t bar = line.find('|');
      if (bar == std::string_view::npos) continue;
      std::string_view name = line.substr(0, bar);
      while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
      if (name.empty() || name == "Property" ||
          name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789._") !=
              std::string_view::npos) {
        continue;
      }
      names.emplace(name);
    }
    free(text);
    return names;
  }();
  return known.count(key) != 0;
}

KafkaPropertyUse ClassifyKafkaProperty(std::string_view key) {
  const AllowedProperty *p = FindAllowed(key);
  if (p == nullptr) return KafkaPropertyUse::kRefused;
  return p->who == Allowed::kAnyone ? KafkaPropertyUse::kAnyone : KafkaPropertyUse::kSuperuser;
}

std::optional<std::string> ValidateKafkaOptions(const SinkOptions &options, bool superuser) {
  KafkaConfPtr conf(rd_kafka_conf_new());
  bool has_bootstrap = false;
  std::string protocol;   // security.protocol, as last set
  std::string mechanism;  // sasl.mechanism(s), as last set
  for (const SinkOption &opt : options) {
    if (opt.kind == SinkOption::Kind::kUnresolved) return "option \"" + opt.key + "\" " + opt.text;
    if (opt.kind != SinkOption::Kind::kString) {
      return "option \"" + opt.key + "\" must be a JSON string";
    }
    const AllowedProperty *allowed = FindAllowed(opt.key);
    if (allowed != nullptr && allowed->who == Allowed::kSuperuser && !superuser) {
      return "option \"" + opt.key +
             "\" may only be set by a superuser (it makes the server open a file, fetch a URL "
             "or run Kerberos)";
    }
    // A property outbox does not allow is never handed to librdkafka: some
    // act as they are set (plugin.library.paths loads the library at once),
    // and librdkafka's list of its properties leaves some out. One it does
    // not know is refused in librdkafka's own words for it.
    if (allowed == nullptr) {
      if (KnownToLibrdkafka(opt.key)) {
        return "option \"" + opt.key +
               "\" is not allowed in a sink (only the producer properties the README lists)";
      }
      return "option \"" + opt.key + "\": No such configuration property: \"" + opt.key + "\"";
    }
    char errstr[512];
    errstr[0] = '\0';
    if (rd_kafka_conf_set(conf.get(), opt.key.c_str(), opt.text.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
      return "option \"" + opt.key + "\": " + TrimmedKafkaText(errstr);
    }
    // The two names are aliases of one property: the last one set wins.
    if (opt.key == "bootstrap.servers" || opt.key == "metadata.broker.list") {
      has_bootstrap = !opt.text.empty();
    }
    if (opt.key == "security.protocol") protocol = opt.text;
    if (opt.key == "sasl.mechanisms" || opt.key == "sasl.mechanism") mechanism = opt.text;
  }
  if (!has_bootstrap) return std::string("option \"bootstrap.servers\" is required");
  // SASL's default mechanism is GSSAPI, which runs Kerberos' kinit through
  // /bin/sh: like the sasl.kerberos.* properties, a superuser's choice.
  auto lower = [](std::string t) {
    for (char &c : t) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return t;
  };
  const bool sasl = lower(protocol).rfind("sasl_", 0) == 0;
  if (sasl && !superuser && (mechanism.empty() || lower(mechanism) == "gssapi")) {
    return std::string(
        "option \"sasl.mechanisms\" must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER "
        "unless a superuser sets it (GSSAPI, the default, runs Kerberos' kinit)");
  }
  return std::nullopt;
}

std::optional<std::string> ParseRedisOptions(const SinkOptions &options, RedisOptions *out) {
  RedisOptions r;
  for (const SinkOption &opt : options) {
    if (opt.kind == SinkOption::Kind::kUnresolved) return "option \"" + opt.key + "\" " + opt.text;
    const bool numeric_ok = opt.key == "port" || opt.key == "db" || opt.key == "maxlen";
    if (opt.key != "host" && opt.key != "password" && opt.key != "mode" && !numeric_ok) {
      return "unknown option \"" + opt.key + "\" (valid: host, port, db, password, mode, maxlen)";
    }
    if (opt.kind == SinkOption::Kind::kOther ||
        (opt.kind == SinkOption::Kind::kNumber && !numeric_ok)) {
      return "option \"" + opt.key + "\" must be a JSON string" + (numeric_ok ? " or number" : "");
    }
    if (opt.key == "host") {
      if (opt.text.empty()) return std::string("option \"host\" must not be empty");
      r.host = opt.text;
    } else if (opt.key == "password") {
      r.password = opt.text;
    } else if (opt.key == "mode") {
      if (opt.text == "stream") {
        r.mode = RedisOptions::Mode::kStream;
      } else if (opt.text == "publish") {
        r.mode = RedisOptions::Mode::kPublish;
      } else if (opt.text == "list") {
        r.mode = RedisOptions::Mode::kList;
      } else {
        return "option \"mode\" must be \"stream\", \"publish\" or \"list\", not \"" + opt.text +
               "\"";
      }
    } else {
      const std::optional<int64_t> v = ParseInteger(opt);
      if (!v) return "option \"" + opt.key + "\" must be an integer, not \"" + opt.text + "\"";
      if (opt.key == "port") {
        if (*v < 1 || *v > 65535) return std::string("option \"port\" must be between 1 and 65535");
        r.port = static_cast<int>(*v);
      } else if (opt.key == "db") {
        if (*v < 0 || *v > 2147483647) {
          return std::string("option \"db\" must be between 0 and 2147483647");
        }
        r.db = *v;
      } else {
        if (*v < 1) return std::string("option \"maxlen\" must be at least 1");
        r.maxlen = *v;
      }
    }
  }
  if (r.maxlen && r.mode != RedisOptions::Mode::kStream) {
    return std::string("option \"maxlen\" applies only to mode \"stream\"");
  }
  if (out != nullptr) *out = r;
  return std::nullopt;
}

}  // namespace outbox
