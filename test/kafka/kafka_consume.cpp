// kafka_consume: read Kafka topics and print every message as one JSON line.
//
// What: assigns all partitions of the given topics (no consumer-group join, so it starts
// in milliseconds instead of waiting for a rebalance), reads from the beginning and prints
//
//   {"topic":"t","partition":0,"offset":3,"key":"k"|null,"value":"v"|null,
//    "headers":[["name","value"|null],...]}
//
// one message per line on stdout, flushed per line. Nothing else ever goes to stdout;
// diagnostics go to stderr. Keys, values and header values are bytes, printed as JSON
// strings assuming UTF-8: `"`, `\` and control characters (< 0x20, and 0x7f) are escaped
// (control characters as \u00XX); a byte that is not part of valid UTF-8 is printed as
// \u00XX too, so the output is always valid JSON (but such bytes do not round-trip).
//
// Why: the outbox TAP tests need to see exactly what the extension published (key,
// value, headers, partition) on the librdkafka mock cluster started by kafka_broker.
// kcat can read the mock too, but its -J output varies by version; this tool is ours.
//
// Usage:
//   kafka_consume -b BOOTSTRAP -t TOPIC [-t TOPIC]... [--count N] [--timeout-ms T]
//                 [--from-beginning | --from-end] [-X prop=value]...
//     -b               bootstrap.servers (required), e.g. the kafka_broker BOOTSTRAP list
//     -t               topic to read, repeatable (at least one)
//     --count N        exit after N messages in total (default: no limit)
//     --timeout-ms T   exit when no message arrived for T ms (default 5000); the wait for
//                      the topics' metadata (topic missing, brokers down) counts too
//     --from-beginning start at the earliest offset (the default)
//     --from-end       start at the end: only messages produced after the start
//     -X prop=value    extra librdkafka consumer property (repeatable)
// Exit status: 0 when it ran (even if it printed nothing: a topic that never appeared is
// reported on stderr only); 2 on bad usage; 1 if the consumer cannot be created.
//
// Build: make -C test/kafka (see the Makefile there).
#include <librdkafka/rdkafka.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

struct Options {
  std::string bootstrap;
  std::vector<std::string> topics;
  long count = -1;
  long timeout_ms = 5000;
  bool from_beginning = true;
  std::vector<std::pair<std::string, std::string>> props;
};

using Clock = std::chrono::steady_clock;

bool ParseLong(const char *s, long lo, long hi, long *out) {
  errno = 0;
  char *end = nullptr;
  long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// Length of the valid UTF-8 sequence starting at p (at most n bytes), or 0 if invalid.
size_t Utf8SeqLen(const unsigned char *p, size_t n) {
  unsigned char c = p[0];
  size_t len;
  unsigned int cp;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (n < len) return 0;
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (p[i] & 0x3F);
  }
  if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
  if (cp >= 0xD800 && cp <= 0xDFFF) return 0;  // UTF-16 surrogates are not characters
  return len;
}

void AppendEscapedByte(std::string *out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "\\u%04x", c);
  out->append(buf);
}

// Appends a JSON string literal for the bytes, or null when data is NULL.
void AppendJsonString(std::string *out, const void *data, size_t len) {
  if (data == nullptr) {
    out->append("null");
    return;
  }
  const unsigned char *p = static_cast<const unsigned char *>(data);
  out->push_back('"');
  size_t i = 0;
  while (i < len) {
    unsigned char c = p[i];
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      i++;
    } else if (c < 0x20 || c == 0x7f) {
      AppendEscapedByte(out, c);
      i++;
    } else {
      size_t n = Utf8SeqLen(p + i, len - i);
      if (n == 0) {
        AppendEscapedByte(out, c);
        i++;
      } else {
        out->append(reinterpret_cast<const char *>(p + i), n);
        i += n;
      }
    }
  }
  out->push_back('"');
}

void AppendJsonString(std::string *out, const std::string &s) {
  AppendJsonString(out, s.data(), s.size());
}

std::string MessageToJson(const rd_kafka_message_t *m) {
  std::string j = "{\"topic\":";
  AppendJsonString(&j, rd_kafka_topic_name(m->rkt));
  j += ",\"partition\":" + std::to_string(m->partition);
  j += ",\"offset\":" + std::to_string(m->offset);
  j += ",\"key\":";
  AppendJsonString(&j, m->key, m->key_len);
  j += ",\"value\":";
  AppendJsonString(&j, m->payload, m->len);
  j += ",\"headers\":[";
  rd_kafka_headers_t *hdrs = nullptr;
  if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR && hdrs != nullptr) {
    const char *name;
    const void *val;
    size_t size;
    for (size_t i = 0;
         rd_kafka_header_get_all(hdrs, i, &name, &val, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; i++) {
      if (i > 0) j += ",";
      j += "[";
      AppendJsonString(&j, name, std::strlen(name));
      j += ",";
      AppendJsonString(&j, val, size);
      j += "]";
    }
  }
  j += "]}\n";
  return j;
}

void Usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s -b BOOTSTRAP -t TOPIC [-t TOPIC]... [--count N] [--timeout-ms T]\n"
               "          [--from-beginning | --from-end] [-X prop=value]...\n",
               argv0);
}

bool ParseArgs(int argc, char **argv, Options *o) {
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : nullptr;
    bool takes_value = a == "-b" || a == "-t" || a == "--count" || a == "--timeout-ms" || a == "-X";
    if (takes_value) {
      if (v == nullptr) return false;
      i++;
    }
    if (a == "-b") {
      o->bootstrap = v;
    } else if (a == "-t") {
      if (*v == '\0') return false;
      o->topics.push_back(v);
    } else if (a == "--count") {
      if (!ParseLong(v, 0, LONG_MAX, &o->count)) return false;
    } else if (a == "--timeout-ms") {
      if (!ParseLong(v, 0, 24L * 3600 * 1000, &o->timeout_ms)) return false;
    } else if (a == "-X") {
      const char *eq = std::strchr(v, '=');
      if (eq == nullptr || eq == v) return false;
      o->props.emplace_back(std::string(v, eq), std::string(eq + 1));
    } else if (a == "--from-beginning") {
      o->from_beginning = true;
    } else if (a == "--from-end") {
      o->from_beginning = false;
    } else {
      return false;
    }
  }
  return !o->bootstrap.empty() && !o->topics.empty();
}

long MsSince(Clock::time_point t) {
  return static_cast<long>(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count());
}

// Partition counts of the topics, polled until all exist or the deadline passes; a topic
// missing at the deadline is left out (and reported on stderr). Asks for the metadata of
// all topics, not of the named ones: the mock cluster creates any topic named in a
// Metadata request, and a reader must not create what it is checking for.
std::map<std::string, int> PartitionCounts(rd_kafka_t *rk, const std::vector<std::string> &topics,
                                           Clock::time_point start, long timeout_ms) {
  std::map<std::string, int> counts;
  std::string last_error;
  for (;;) {
    long left = timeout_ms - MsSince(start);
    int wait_ms = static_cast<int>(left < 100 ? 100 : left > 2000 ? 2000 : left);
    const struct rd_kafka_metadata *md = nullptr;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, nullptr, &md, wait_ms);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (int i = 0; i < md->topic_cnt; i++) {
        const rd_kafka_metadata_topic &t = md->topics[i];
        if (t.err == RD_KAFKA_RESP_ERR_NO_ERROR && t.partition_cnt > 0) {
          counts[t.topic] = t.partition_cnt;
        }
      }
      rd_kafka_metadata_destroy(md);
    } else {
      last_error = rd_kafka_err2name(err);
    }
    bool all = true;
    for (const std::string &t : topics) all = all && counts.count(t) > 0;
    if (all || MsSince(start) >= timeout_ms) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (const std::string &t : topics) {
    if (counts.count(t) == 0) {
      std::fprintf(stderr, "kafka_consume: topic %s did not appear within %ld ms%s%s\n", t.c_str(),
                   timeout_ms, last_error.empty() ? "" : ": last error ", last_error.c_str());
    }
  }
  return counts;
}

bool WriteOut(const std::string &s) {
  if (std::fwrite(s.data(), 1, s.size(), stdout) != s.size()) return false;
  return std::fflush(stdout) == 0;
}

}  // namespace

int main(int argc, char **argv) {
  Options opt;
  if (!ParseArgs(argc, argv, &opt)) {
    Usage(argv[0]);
    return 2;
  }
  std::signal(SIGPIPE, SIG_IGN);

  char errstr[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  // A fresh group id per run: offsets are never committed, the group only exists because
  // rd_kafka_assign() needs a consumer-group handle.
  std::string group = "kafka_consume-" + std::to_string(getpid()) + "-" +
                      std::to_string(Clock::now().time_since_epoch().count());
  std::vector<std::pair<std::string, std::string>> props = {
      {"bootstrap.servers", opt.bootstrap},
      {"group.id", group},
      {"enable.auto.commit", "false"},
      {"enable.auto.offset.store", "false"},
      {"enable.partition.eof", "false"},
      {"auto.offset.reset", opt.from_beginning ? "earliest" : "latest"},
      {"fetch.wait.max.ms", "100"},
      {"reconnect.backoff.max.ms", "1000"},
      {"topic.metadata.refresh.interval.ms", "1000"},
      {"log_level", "3"},
  };
  props.insert(props.end(), opt.props.begin(), opt.props.end());
  for (const auto &kv : props) {
    if (rd_kafka_conf_set(conf, kv.first.c_str(), kv.second.c_str(), errstr, sizeof(errstr)) !=
        RD_KAFKA_CONF_OK) {
      std::fprintf(stderr, "kafka_consume: %s=%s: %s\n", kv.first.c_str(), kv.second.c_str(),
                   errstr);
      rd_kafka_conf_destroy(conf);
      return 2;
    }
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    std::fprintf(stderr, "kafka_consume: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_poll_set_consumer(rk);

  Clock::time_point last = Clock::now();
  rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(16);
  std::map<std::string, int> counts = PartitionCounts(rk, opt.topics, last, opt.timeout_ms);
  for (const std::string &t : opt.topics) {
    if (counts.count(t) == 0) continue;
    bool dup = false;  // -t given twice: assign once
    for (int i = 0; i < parts->cnt; i++) dup = dup || t == parts->elems[i].topic;
    for (int p = 0; p < counts[t] && !dup; p++) {
      rd_kafka_topic_partition_list_add(parts, t.c_str(), p)->offset =
          opt.from_beginning ? RD_KAFKA_OFFSET_BEGINNING : RD_KAFKA_OFFSET_END;
    }
  }

  long seen = 0;
  bool out_ok = true;
  if (parts->cnt > 0 && opt.count != 0) {
    rd_kafka_resp_err_t err = rd_kafka_assign(rk, parts);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::fprintf(stderr, "kafka_consume: assign: %s\n", rd_kafka_err2str(err));
    } else {
      std::map<std::string, int> reported;  // error name -> times seen, to limit noise
      while (out_ok && (opt.count < 0 || seen < opt.count)) {
        long left = opt.timeout_ms - MsSince(last);
        if (left <= 0) break;
        rd_kafka_message_t *m =
            rd_kafka_consumer_poll(rk, static_cast<int>(left < 100 ? left : 100));
        if (m == nullptr) continue;
        if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
          out_ok = WriteOut(MessageToJson(m));
          seen++;
          last = Clock::now();
        } else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          if (reported[rd_kafka_err2name(m->err)]++ < 3) {
            std::fprintf(stderr, "kafka_consume: %s\n", rd_kafka_message_errstr(m));
          }
        }
        rd_kafka_message_destroy(m);
      }
    }
  }
  rd_kafka_topic_partition_list_destroy(parts);
  // Nothing was committed and the group was never joined: skip the close handshake.
  rd_kafka_destroy_flags(rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
  return 0;
}
