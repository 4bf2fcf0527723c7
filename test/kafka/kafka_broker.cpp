// kafka_broker: a scriptable in-process Kafka stand-in for tests.
//
// What: starts librdkafka's mock cluster (rdkafka_mock.h) with N brokers listening on
// 127.0.0.1 (random ports), prints one line
//
//     BOOTSTRAP 127.0.0.1:PORT,127.0.0.1:PORT,...
//
// to stdout, then reads commands from stdin, one per line, and answers each with exactly
// one line, `OK` or `ERR <message>`, flushed at once. It exits cleanly on EOF or `quit`.
//
// Why: there is no real Kafka on the test machines, and the mock cluster can only be driven
// by the process that created it, so this process owns it and exposes its fault-injection
// calls over stdin/stdout. Tests (test/lib/OutboxKafka.pm) hold the pipe: when the test
// dies, stdin reaches EOF and the broker goes away with it.
//
// Usage:
//   kafka_broker [--brokers N] [--partitions N] [--topic NAME[:PARTITIONS[:REPLICATION]]]...
//                [--nagle] [--debug] [--port P] [--serve]
//     --brokers N      brokers in the cluster, ids 1..N (default 3)
//     --partitions N   partition count for topics created by --topic or create_topic when
//                      no count is given (default 4). Topics the mock creates on its own get
//                      4 partitions whatever this says: that default is hard-coded in
//                      librdkafka 2.0.2 and not settable through the public API.
//     --topic ...      create a topic before BOOTSTRAP is printed (repeatable)
//     --nagle          leave Nagle's algorithm on for the connections the brokers accept, as
//                      the mock cluster itself does (for comparison). By default kafka_broker
//                      sets TCP_NODELAY on every accepted connection, as Kafka brokers do:
//                      with Nagle on, a second response on a connection waits for the
//                      client's delayed ACK, so a producer flush that sends more than one
//                      Produce request to one broker takes ~40 ms longer (measured with a
//                      plain producer, 100 keyed messages over 6 partitions + flush: p50
//                      44 ms with --nagle, 0.3 ms without).
//     --debug          librdkafka debug=mock,broker logging on stderr
//     --port P         broker i listens on 127.0.0.1:P+i-1 instead of a random port, so a
//                      fixed bootstrap address (127.0.0.1:9092) reaches it: for people
//                      trying outbox by hand (the README's Quick start); tests leave it out
//     --serve          read no commands: run until SIGINT, SIGTERM or SIGHUP (a broker
//                      started in the background of a shell, with --port)
//
// Commands (words separated by blanks; ids are 1..N):
//   ping                                  -> OK
//   down <broker_id|all>                  close its connections, refuse new ones
//   up <broker_id|all>                    accept connections again (same port)
//   rtt <broker_id|all> <ms>              delay every response by ms
//   produce_errors <count> <ERR_NAME>     the next <count> Produce requests (any broker)
//                                         fail with ERR_NAME
//   request_errors <api> <count> <ERR_NAME>
//                                         same for any request type; api is a number or
//                                         Produce (0), Fetch (1), ListOffsets (2),
//                                         Metadata (3), FindCoordinator (10),
//                                         InitProducerId (22)
//   clear_errors <api>                    drop errors still queued for that request type
//   create_topic <name> [partitions] [replication]
//                                         replication defaults to min(3, brokers)
//   leader <topic> <partition> <broker_id|-1>
//                                         move the partition leader; -1 = leaderless. The
//                                         mock creates a missing topic here (with
//                                         partition+1 partitions).
//   topic_error <topic> <ERR_NAME>        error returned for the topic in Metadata responses
//                                         (NO_ERROR clears it; creates a missing topic)
//   bootstrap                             -> OK <bootstrap list>
//   help                                  -> OK <command names>
//   quit                                  -> OK, then exit
//
// ERR_NAME is a librdkafka error name, matched case-insensitively, with or without the
// RD_KAFKA_RESP_ERR_ prefix and with or without the leading underscore librdkafka puts on
// its local errors: NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT, MSG_SIZE_TOO_LARGE,
// TOPIC_AUTHORIZATION_FAILED, NOT_ENOUGH_REPLICAS, INVALID_RECORD, _TRANSPORT (the broker
// drops the connection instead of answering), ... A decimal error code also works.
//
// Mock-cluster behaviour worth knowing (librdkafka 2.0.2, measured with kcat and
// kafka_consume):
// - A Metadata request that names a missing topic creates it, with 4 partitions and
//   replication min(3, brokers), whatever the client's allow.auto.create.topics says. So a
//   producer's first message creates its topic, and so does a consumer that asks for the
//   topic by name (kcat -C does). A Metadata request for all topics creates nothing, which
//   is what kafka_consume uses. `leader` and `topic_error` create missing topics too.
//   Pre-create topics (--topic, create_topic) when the partition count matters.
// - `down` closes the broker's connections and refuses new ones, but the broker keeps its
//   partition leaderships: those partitions are unavailable until `up` or `leader`.
//   Clients back off between reconnects up to reconnect.backoff.max.ms (default 10 s), so
//   after `up all` a producer that saw 5 s of outage needed ~5.7 s to deliver again with
//   the default, ~0.3 s with reconnect.backoff.max.ms=1000.
// - Leaderless (`leader t 0 -1`): Metadata reports no leader, producers keep the
//   partition's messages queued (failing with _MSG_TIMED_OUT after message.timeout.ms) and
//   deliver them as soon as `leader` sets one again (measured: at once).
// - Errors pushed with produce_errors are consumed one per Produce request, by any client,
//   on any broker. Retriable ones (NOT_LEADER_FOR_PARTITION, REQUEST_TIMED_OUT,
//   NOT_ENOUGH_REPLICAS) are retried by the producer; MSG_SIZE_TOO_LARGE,
//   TOPIC_AUTHORIZATION_FAILED, INVALID_RECORD fail the delivery.
// - The mock keeps an idempotent producer's ids but does not deduplicate retried batches
//   unless a transactional.id is set. Nor does it check their sequence numbers, and that
//   can make a producer lose a message when Produce requests fail: with several requests
//   in flight, one that failed (not appended) can be followed by a later request for the
//   same partition that succeeds (appended), which a real broker refuses as out of
//   sequence. librdkafka then takes the failed batch for persisted (a later one was
//   acknowledged) and reports its messages delivered. Measured with librdkafka 2.0.2: in
//   about one run in ten of TAP 023 one event was reported delivered and never appended;
//   none in 20 runs with max.in.flight.requests.per.connection=1. Tests that inject
//   Produce errors therefore give their sink one request in flight per connection, so a
//   failed request is retried before any later one is sent.
//
// Build: make -C test/kafka (see the Makefile there).
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Whether accept() and accept4() below set TCP_NODELAY (--nagle clears it before the cluster
// starts).
std::atomic<bool> g_nodelay{true};

// --port: the first port, and how many listening sockets still get the next one (the
// brokers' listeners, which the mock cluster binds one per broker, in id order, to
// 127.0.0.1 port 0 while rd_kafka_mock_cluster_new runs). Set before the cluster starts.
std::atomic<int> g_next_port{0};
std::atomic<int> g_ports_left{0};

// Sets TCP_NODELAY on a socket accept() returned; a socket that is not TCP refuses the
// option, which is fine. errno is left as accept() set it.
int NoDelay(int fd) {
  if (fd >= 0 && g_nodelay.load(std::memory_order_relaxed)) {
    const int saved = errno;
    const int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    errno = saved;
  }
  return fd;
}

template <typename Fn>
Fn RealFunction(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "kafka_broker: dlsym(RTLD_NEXT, %s) failed\n", name);
    std::abort();
  }
  return reinterpret_cast<Fn>(f);
}

struct Options {
  int brokers = 3;
  int partitions = 4;
  bool debug = false;
  bool nagle = false;
  bool serve = false;
  int port = 0;
  struct Topic {
    std::string name;
    int partitions;
    int replication;
  };
  std::vector<Topic> topics;
};

// Parses a whole decimal string into [lo, hi]; false on junk or overflow.
bool ParseInt(const std::string &s, long lo, long hi, long *out) {
  if (s.empty()) return false;
  errno = 0;
  char *end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::string Upper(std::string s) {
  for (char &c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

// Kafka's rule: 1..249 characters of [A-Za-z0-9._-].
bool ValidTopicName(const std::string &t) {
  if (t.empty() || t.size() > 249) return false;
  for (char c : t) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// librdkafka error name -> code, built from rd_kafka_get_err_descs().
class ErrorNames {
 public:
  ErrorNames() {
    const struct rd_kafka_err_desc *descs = nullptr;
    size_t cnt = 0;
    rd_kafka_get_err_descs(&descs, &cnt);
    for (size_t i = 0; i < cnt; i++) {
      if (descs[i].name == nullptr || descs[i].name[0] == '\0') continue;
      exact_[Upper(descs[i].name)] = descs[i].code;
    }
  }

  bool Lookup(const std::string &raw, rd_kafka_resp_err_t *out) const {
    std::string name = Upper(raw);
    static const std::string kPrefix = "RD_KAFKA_RESP_ERR_";
    if (name.compare(0, kPrefix.size(), kPrefix) == 0) name = name.substr(kPrefix.size());
    long code;
    if (ParseInt(name, INT_MIN, INT_MAX, &code)) {
      *out = static_cast<rd_kafka_resp_err_t>(code);
      return true;
    }
    if (name.empty()) return false;
    auto it = exact_.find(name);
    if (it == exact_.end()) {
      // Local errors are named "_FOO"; broker errors "FOO". Try the other spelling.
      it = exact_.find(name[0] == '_' ? name.substr(1) : "_" + name);
    }
    if (it == exact_.end()) return false;
    *out = it->second;
    return true;
  }

 private:
  std::map<std::string, rd_kafka_resp_err_t> exact_;
};

bool ParseApiKey(const std::string &s, int16_t *out) {
  static const std::map<std::string, int16_t> kNames = {{"PRODUCE", 0},
                                                        {"FETCH", 1},
                                                        {"LISTOFFSETS", 2},
                                                        {"METADATA", 3},
                                                        {"OFFSETCOMMIT", 8},
                                                        {"OFFSETFETCH", 9},
                                                        {"FINDCOORDINATOR", 10},
                                                        {"JOINGROUP", 11},
                                                        {"HEARTBEAT", 12},
                                                        {"SYNCGROUP", 14},
                                                        {"APIVERSIONS", 18},
                                                        {"INITPRODUCERID", 22},
                                                        {"ADDPARTITIONSTOTXN", 24},
                                                        {"ENDTXN", 26}};
  long v;
  if (ParseInt(s, 0, 100, &v)) {
    *out = static_cast<int16_t>(v);
    return true;
  }
  auto it = kNames.find(Upper(s));
  if (it == kNames.end()) return false;
  *out = it->second;
  return true;
}

class Broker {
 public:
  Broker(rd_kafka_mock_cluster_t *mc, int brokers, int partitions)
      : mc_(mc), brokers_(brokers), partitions_(partitions) {}

  // Executes one command line; returns the reply line (without newline).
  // Sets *quit when the command asks us to exit.
  std::string Execute(const std::string &line, bool *quit) {
    std::istringstream in(line);
    std::vector<std::string> w;
    for (std::string tok; in >> tok;) w.push_back(tok);
    if (w.empty()) return "ERR empty command";
    const std::string cmd = w[0];
    const size_t n = w.size();

    if (cmd == "ping" && n == 1) return "OK";
    if (cmd == "quit" && n == 1) {
      *quit = true;
      return "OK";
    }
    if (cmd == "help") {
      return "OK ping down up rtt produce_errors request_errors clear_errors create_topic "
             "leader topic_error bootstrap quit";
    }
    if (cmd == "bootstrap" && n == 1) return std::string("OK ") + Bootstraps();
    if ((cmd == "down" || cmd == "up") && n == 2) {
      int32_t id;
      if (!ParseBrokerOrAll(w[1], &id)) return BadBroker(w[1]);
      rd_kafka_resp_err_t err = cmd == "down" ? rd_kafka_mock_broker_set_down(mc_, id)
                                              : rd_kafka_mock_broker_set_up(mc_, id);
      return Reply(err);
    }
    if (cmd == "rtt" && n == 3) {
      int32_t id;
      long ms;
      if (!ParseBrokerOrAll(w[1], &id)) return BadBroker(w[1]);
      if (!ParseInt(w[2], 0, 3600 * 1000, &ms)) return "ERR rtt must be 0..3600000 ms";
      return Reply(rd_kafka_mock_broker_set_rtt(mc_, id, static_cast<int>(ms)));
    }
    if (cmd == "produce_errors" && n == 3) return PushErrors(0, w[1], w[2]);
    if (cmd == "request_errors" && n == 4) {
      int16_t api;
      if (!ParseApiKey(w[1], &api)) return "ERR unknown request type: " + w[1];
      return PushErrors(api, w[2], w[3]);
    }
    if (cmd == "clear_errors" && n == 2) {
      int16_t api;
      if (!ParseApiKey(w[1], &api)) return "ERR unknown request type: " + w[1];
      rd_kafka_mock_clear_request_errors(mc_, api);
      return "OK";
    }
    if (cmd == "create_topic" && n >= 2 && n <= 4) {
      long parts = partitions_, repl = brokers_ < 3 ? brokers_ : 3;
      if (!ValidTopicName(w[1])) return "ERR invalid topic name: " + w[1];
      if (n >= 3 && !ParseInt(w[2], 1, 100000, &parts)) return "ERR partitions must be 1..100000";
      if (n >= 4 && !ParseInt(w[3], 1, brokers_, &repl))
        return "ERR replication must be 1.." + std::to_string(brokers_);
      return Reply(rd_kafka_mock_topic_create(mc_, w[1].c_str(), static_cast<int>(parts),
                                              static_cast<int>(repl)));
    }
    if (cmd == "leader" && n == 4) {
      long part, id;
      if (!ValidTopicName(w[1])) return "ERR invalid topic name: " + w[1];
      if (!ParseInt(w[2], 0, 100000, &part)) return "ERR partition must be 0..100000";
      if (!ParseInt(w[3], -1, brokers_, &id) || id == 0) return BadBroker(w[3]);
      return Reply(rd_kafka_mock_partition_set_leader(mc_, w[1].c_str(), static_cast<int32_t>(part),
                                                      static_cast<int32_t>(id)));
    }
    if (cmd == "topic_error" && n == 3) {
      rd_kafka_resp_err_t err;
      if (!ValidTopicName(w[1])) return "ERR invalid topic name: " + w[1];
      if (!names_.Lookup(w[2], &err)) return "ERR unknown error name: " + w[2];
      rd_kafka_mock_topic_set_error(mc_, w[1].c_str(), err);
      return "OK";
    }
    return "ERR unknown command or wrong argument count: " + cmd;
  }

  const char *Bootstraps() const { return rd_kafka_mock_cluster_bootstraps(mc_); }

 private:
  bool ParseBrokerOrAll(const std::string &s, int32_t *id) const {
    if (s == "all") {
      *id = -1;
      return true;
    }
    long v;
    if (!ParseInt(s, 1, brokers_, &v)) return false;
    *id = static_cast<int32_t>(v);
    return true;
  }

  std::string BadBroker(const std::string &s) const {
    return "ERR bad broker id " + s + " (expected 1.." + std::to_string(brokers_) + " or all)";
  }

  std::string PushErrors(int16_t api, const std::string &count, const std::string &name) {
    long cnt;
    rd_kafka_resp_err_t err;
    if (!ParseInt(count, 1, 1000000, &cnt)) return "ERR count must be 1..1000000";
    if (!names_.Lookup(name, &err)) return "ERR unknown error name: " + name;
    std::vector<rd_kafka_resp_err_t> errs(static_cast<size_t>(cnt), err);
    rd_kafka_mock_push_request_errors_array(mc_, api, errs.size(), errs.data());
    return "OK";
  }

  static std::string Reply(rd_kafka_resp_err_t err) {
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return "OK";
    return std::string("ERR ") + rd_kafka_err2name(err) + ": " + rd_kafka_err2str(err);
  }

  rd_kafka_mock_cluster_t *mc_;
  int brokers_;
  int partitions_;
  ErrorNames names_;
};

void Usage(const char *argv0) {
  std::fprintf(stderr,
               "usage: %s [--brokers N] [--partitions N] "
               "[--topic NAME[:PARTITIONS[:REPLICATION]]]... [--nagle] [--debug] [--port P] "
               "[--serve]\n"
               "Prints BOOTSTRAP <list>, then serves commands on stdin (see source header);\n"
               "with --serve, runs until interrupted.\n",
               argv0);
}

bool ParseArgs(int argc, char **argv, Options *o) {
  std::vector<std::string> topic_specs;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&](std::string *v) {
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    std::string v;
    long x;
    if (a == "--brokers") {
      if (!value(&v) || !ParseInt(v, 1, 64, &x)) return false;
      o->brokers = static_cast<int>(x);
    } else if (a == "--partitions") {
      if (!value(&v) || !ParseInt(v, 1, 100000, &x)) return false;
      o->partitions = static_cast<int>(x);
    } else if (a == "--topic") {
      if (!value(&v)) return false;
      topic_specs.push_back(v);
    } else if (a == "--nagle") {
      o->nagle = true;
    } else if (a == "--debug") {
      o->debug = true;
    } else if (a == "--port") {
      if (!value(&v) || !ParseInt(v, 1, 65535 - 64, &x)) return false;
      o->port = static_cast<int>(x);
    } else if (a == "--serve") {
      o->serve = true;
    } else {
      return false;
    }
  }
  // Topics last, so --partitions/--brokers given after --topic still apply.
  for (const std::string &spec : topic_specs) {
    Options::Topic t{"", o->partitions, o->brokers < 3 ? o->brokers : 3};
    std::vector<std::string> parts;
    std::string cur;
    std::istringstream in(spec);
    long x;
    while (std::getline(in, cur, ':')) parts.push_back(cur);
    if (parts.empty() || parts.size() > 3 || !ValidTopicName(parts[0])) return false;
    t.name = parts[0];
    if (parts.size() >= 2) {
      if (!ParseInt(parts[1], 1, 100000, &x)) return false;
      t.partitions = static_cast<int>(x);
    }
    if (parts.size() == 3) {
      if (!ParseInt(parts[2], 1, o->brokers, &x)) return false;
      t.replication = static_cast<int>(x);
    }
    o->topics.push_back(t);
  }
  return true;
}

// Reads stdin one line at a time with read(2), retrying on EINTR (stdio would report an
// interrupted read as end of input and the broker would quit under the test's feet).
class LineReader {
 public:
  // False at end of input or on a read error (reported on stderr).
  bool Next(std::string *line) {
    for (;;) {
      size_t nl = buf_.find('\n');
      if (nl != std::string::npos) {
        *line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return true;
      }
      char chunk[4096];
      ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
      if (n > 0) {
        buf_.append(chunk, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        if (n < 0) std::fprintf(stderr, "kafka_broker: read stdin: %s\n", std::strerror(errno));
        if (buf_.empty()) return false;
        line->swap(buf_);  // last line without a newline
        buf_.clear();
        return true;
      }
    }
  }

 private:
  std::string buf_;
};

// Writes one reply line with write(2) (unbuffered, EINTR retried); false when stdout is gone
// (reader died).
bool WriteLine(const std::string &s) {
  std::string line = s + "\n";
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = write(STDOUT_FILENO, line.data() + off, line.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

// The mock cluster's brokers accept their connections with accept() inside librdkafka.so.
// These definitions in the executable come first in symbol lookup, so librdkafka's calls land
// here; the libc functions are found with dlsym(RTLD_NEXT). (librdkafka 2.0.2 calls accept()
// only; accept4() is covered for other versions.)
extern "C" int accept(int fd, struct sockaddr *addr, socklen_t *addr_len) {
  using Fn = int (*)(int, struct sockaddr *, socklen_t *);
  static const Fn real = RealFunction<Fn>("accept");
  return NoDelay(real(fd, addr, addr_len));
}

extern "C" int accept4(int fd, struct sockaddr *addr, socklen_t *addr_len, int flags) {
  using Fn = int (*)(int, struct sockaddr *, socklen_t *, int);
  static const Fn real = RealFunction<Fn>("accept4");
  return NoDelay(real(fd, addr, addr_len, flags));
}

// --port: the brokers' listeners bind to 127.0.0.1 port 0 (any port); the next --port
// number replaces the 0 while any are left. Every other bind passes through unchanged.
extern "C" int bind(int fd, const struct sockaddr *addr, socklen_t addr_len) {
  using Fn = int (*)(int, const struct sockaddr *, socklen_t);
  static const Fn real = RealFunction<Fn>("bind");
  if (addr != nullptr && addr->sa_family == AF_INET && addr_len >= sizeof(sockaddr_in)) {
    sockaddr_in in;
    std::memcpy(&in, addr, sizeof(in));
    if (in.sin_port == 0 && g_ports_left.load() > 0) {
      g_ports_left.fetch_sub(1);
      in.sin_port = htons(static_cast<uint16_t>(g_next_port.fetch_add(1)));
      return real(fd, reinterpret_cast<const sockaddr *>(&in), sizeof(in));
    }
  }
  return real(fd, addr, addr_len);
}

int main(int argc, char **argv) {
  Options opt;
  if (!ParseArgs(argc, argv, &opt)) {
    Usage(argv[0]);
    return 2;
  }
  g_nodelay.store(!opt.nagle);
  if (opt.port != 0) {
    g_next_port.store(opt.port);
    g_ports_left.store(opt.brokers);
  }
  // --serve waits for these signals with sigwait(): blocked before librdkafka starts its
  // threads, which inherit the mask, so none of them takes the signal instead.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  if (opt.serve) pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  // A reader that went away must not kill us mid-write with SIGPIPE; we notice the
  // failed write and exit instead.
  std::signal(SIGPIPE, SIG_IGN);

  char errstr[512];
  rd_kafka_conf_t *conf = rd_kafka_conf_new();
  // This handle only hosts the mock cluster: it never connects anywhere, so it has no
  // bootstrap.servers, and its "no bootstrap servers" warning is noise (level 4).
  const char *level = opt.debug ? "7" : "3";
  if (rd_kafka_conf_set(conf, "log_level", level, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK ||
      (opt.debug && rd_kafka_conf_set(conf, "debug", "mock,broker", errstr, sizeof(errstr)) !=
                        RD_KAFKA_CONF_OK)) {
    std::fprintf(stderr, "kafka_broker: conf: %s\n", errstr);
    rd_kafka_conf_destroy(conf);
    return 1;
  }
  rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
  if (rk == nullptr) {
    std::fprintf(stderr, "kafka_broker: rd_kafka_new: %s\n", errstr);
    return 1;
  }
  rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, opt.brokers);
  if (mc == nullptr) {
    std::fprintf(stderr, "kafka_broker: rd_kafka_mock_cluster_new failed\n");
    rd_kafka_destroy(rk);
    return 1;
  }
  // librdkafka 2.4 to at least 2.8: a Produce (v10+) or Fetch (v12+) request that reaches a
  // partition's former leader while the partition has none (`leader t p -1`) makes the mock
  // answer NOT_LEADER with the current leader's address, which it reads from the missing
  // leader: a NULL dereference in the mock's thread, and the test broker dies (seen with
  // 2.8.0, TAP 070's leaderless scenario, "Set fk [0] leader to -1" then a Produce to the old
  // leader). Those versions carry KIP-951's leader hints; capping both APIs below them keeps
  // the mock on the answers older brokers give, which every librdkafka handles (it refreshes
  // metadata on NOT_LEADER). Older mocks never send the hints (and may implement fewer
  // versions than these caps, which must not exceed what the mock implements): unchanged.
  if (rd_kafka_version() >= 0x02040000) {
    rd_kafka_mock_set_apiversion(mc, 0 /* Produce */, 0, 9);
    rd_kafka_mock_set_apiversion(mc, 1 /* Fetch */, 0, 11);
  }
  Broker broker(mc, opt.brokers, opt.partitions);
  int rc = 0;
  for (const Options::Topic &t : opt.topics) {
    rd_kafka_resp_err_t err =
        rd_kafka_mock_topic_create(mc, t.name.c_str(), t.partitions, t.replication);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR) {
      std::fprintf(stderr, "kafka_broker: create topic %s: %s\n", t.name.c_str(),
                   rd_kafka_err2str(err));
      rc = 1;
    }
  }

  if (rc == 0 && opt.serve) {
    std::printf("BOOTSTRAP %s\n", broker.Bootstraps());
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    std::fprintf(stderr, "kafka_broker: %s, exiting\n", strsignal(sig));
  } else if (rc == 0 && WriteLine(std::string("BOOTSTRAP ") + broker.Bootstraps())) {
    std::string line;
    bool quit = false;
    LineReader reader;
    while (!quit && reader.Next(&line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::string reply;
      try {
        reply = broker.Execute(line, &quit);
      } catch (const std::exception &e) {  // bad_alloc and the like: answer, keep serving
        reply = std::string("ERR internal: ") + e.what();
      }
      if (!WriteLine(reply)) {
        std::fprintf(stderr, "kafka_broker: stdout closed, exiting\n");
        break;
      }
    }
    if (!quit) std::fprintf(stderr, "kafka_broker: end of stdin, exiting\n");
  }

  rd_kafka_mock_cluster_destroy(mc);
  rd_kafka_destroy(rk);
  return rc;
}
