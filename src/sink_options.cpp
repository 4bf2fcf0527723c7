#include "sink_options.hpp"

#include <librdkafka/rdkafka.h>

#include <cerrno>
#include <cstdlib>
#include <memory>

namespace outbox {

namespace {

// Properties that would load code or run programs in the process that
// validates them (a user backend) or creates the producer (the publisher, as
// the server's OS user), so a sink owner could run anything there:
// plugin.library.paths and interceptors load libraries at configuration;
// ssl.engine.location and ssl.providers load OpenSSL engines and providers,
// and sasl.kerberos.kinit.cmd is a shell command librdkafka runs, when the
// producer starts. transactional.id would make the producer transactional,
// which the publisher never drives: every delivery would fail.
bool IsForbiddenKafkaProperty(const std::string &key) {
  static const char *const kForbidden[] = {"plugin.library.paths",    "interceptors",
                                           "ssl.engine.location",     "ssl.providers",
                                           "sasl.kerberos.kinit.cmd", "transactional.id"};
  for (const char *forbidden : kForbidden) {
    if (key == forbidden) return true;
  }
  return false;
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

std::optional<std::string> ValidateKafkaOptions(const SinkOptions &options) {
  struct ConfDeleter {
    void operator()(rd_kafka_conf_t *c) const { rd_kafka_conf_destroy(c); }
  };
  std::unique_ptr<rd_kafka_conf_t, ConfDeleter> conf(rd_kafka_conf_new());
  bool has_bootstrap = false;
  for (const SinkOption &opt : options) {
    if (opt.kind != SinkOption::Kind::kString) {
      return "option \"" + opt.key + "\" must be a JSON string";
    }
    if (IsForbiddenKafkaProperty(opt.key)) {
      return "option \"" + opt.key + "\" is not allowed in a sink";
    }
    char errstr[512];
    errstr[0] = '\0';
    if (rd_kafka_conf_set(conf.get(), opt.key.c_str(), opt.text.c_str(), errstr, sizeof errstr) !=
        RD_KAFKA_CONF_OK) {
      std::string message(errstr);
      while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) {
        message.pop_back();  // librdkafka ends some messages with a newline
      }
      return "option \"" + opt.key + "\": " + message;
    }
    // The two names are aliases of one property: the last one set wins.
    if (opt.key == "bootstrap.servers" || opt.key == "metadata.broker.list") {
      has_bootstrap = !opt.text.empty();
    }
  }
  if (!has_bootstrap) return std::string("option \"bootstrap.servers\" is required");
  return std::nullopt;
}

std::optional<std::string> ParseRedisOptions(const SinkOptions &options, RedisOptions *out) {
  RedisOptions r;
  for (const SinkOption &opt : options) {
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
