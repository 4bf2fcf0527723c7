// A private RabbitMQ node for the AMQP sink's unit tests: its own node name,
// ports, directories (mnesia, logs, configuration, an enabled-plugins file
// with no plugins), its own epmd on a port of its own (ERL_EPMD_PORT), and a
// private HOME for the Erlang cookie. It is started through
// /usr/lib/rabbitmq/bin/rabbitmq-server, the package's real start script:
// /usr/sbin/rabbitmq-server is a wrapper that, run as root, switches to the
// rabbitmq user with /var/lib/rabbitmq as its directory (and refuses any
// other user). RABBITMQ_ALLOW_INPUT makes the script exec erl rather than
// fork it, so the node's pid is the one we started, and -noinput keeps the
// shell away from it.
//
// Every process started here dies with its parent (PR_SET_PDEATHSIG), so
// no exit path of a test leaves a node running.
//
// One node per run: SharedRabbitNode() starts a node on first use, for every
// test of the binary. ctest runs each test in a process of its own, so
// under ctest the node is shared by the whole ctest run instead: the first
// test starts it under a watchdog that outlives the test and stops the node
// (and removes its directory) when ctest exits, and the others find it by
// ctest's pid. Tests that stop or pause a node start one of their own.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "sinks/amqp_library.hpp"
#include "test_certificates.hpp"
#include "test_support.hpp"

namespace outbox {
namespace amqp_test {

using test_support::FreePort;

inline std::string ReadAll(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline bool WriteAll(const std::string &path, const std::string &text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  return static_cast<bool>(out);
}

// True once an AMQP login as guest works on the port: the node has booted.
inline bool AmqpAnswers(int port) {
  amqp_connection_state_t conn = amqp_new_connection();
  amqp_socket_t *socket = amqp_tcp_socket_new(conn);
  timeval tv{2, 0};
  bool ok = false;
  if (socket != nullptr && amqp_socket_open_noblock(socket, "127.0.0.1", port, &tv) == 0) {
    amqp_set_handshake_timeout(conn, &tv);
    const amqp_rpc_reply_t reply =
        amqp_login(conn, "/", 0, 131072, 0, AMQP_SASL_METHOD_PLAIN, "guest", "guest");
    ok = reply.reply_type == AMQP_RESPONSE_NORMAL;
  }
  amqp_destroy_connection(conn);
  return ok;
}

class RabbitNode {
 public:
  struct Ports {
    int amqp = 0;
    int amqps = 0;  // 0: no TLS listener
    int epmd = 0;
    int dist = 0;
  };

  // `conf` holds rabbitmq.conf lines besides the listeners; `tls` adds a
  // TLS listener with certificates made for it.
  explicit RabbitNode(std::string conf = "", bool tls = false, std::string dir = "")
      : conf_(std::move(conf)), tls_(tls) {
    if (dir.empty()) {
      const char *tmp = std::getenv("TMPDIR");
      std::string pattern =
          std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/outbox-amqp-node.XXXXXX";
      if (mkdtemp(pattern.data()) != nullptr) dir_ = pattern;
    } else {
      dir_ = std::move(dir);
      std::filesystem::create_directories(dir_);
    }
    static int counter = 0;
    name_ = "outbox-unit-" + std::to_string(getpid()) + "-" + std::to_string(++counter);
  }
  ~RabbitNode() {
    Stop();
    if (!dir_.empty() && remove_dir_) {
      std::error_code ignored;
      std::filesystem::remove_all(dir_, ignored);
    }
  }
  RabbitNode(const RabbitNode &) = delete;
  RabbitNode &operator=(const RabbitNode &) = delete;

  const std::string &dir() const { return dir_; }
  const Ports &ports() const { return ports_; }
  int port() const { return ports_.amqp; }
  bool running() const { return node_ > 0; }
  std::string ca_pem() const { return ReadAll(dir_ + "/ca.pem"); }
  void keep_dir() { remove_dir_ = false; }

  // Starts epmd (once) and the node, on fresh ports the first time, and
  // waits until it takes a login; *error says why not.
  bool Start(std::string *error) {
    if (dir_.empty()) {
      *error = "no directory";
      return false;
    }
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (ports_.amqp == 0 || attempt > 0) {
        if (!Prepare(error)) return false;
      }
      if (Launch(error)) return true;
      Stop();
      if (started_once_) return false;  // a restart keeps its ports: no retry elsewhere
    }
    return false;
  }

  // SIGKILL, as a crash would: the node, not its epmd.
  void Kill() {
    if (node_ <= 0) return;
    kill(node_, SIGCONT);
    kill(node_, SIGKILL);
    waitpid(node_, nullptr, 0);
    node_ = 0;
  }
  void Pause() {
    if (node_ > 0) kill(node_, SIGSTOP);
  }
  void Resume() {
    if (node_ > 0) kill(node_, SIGCONT);
  }
  void Stop() {
    Kill();
    if (epmd_ > 0) {
      kill(epmd_, SIGKILL);
      waitpid(epmd_, nullptr, 0);
      epmd_ = 0;
    }
  }
  std::string Log() const { return ReadAll(dir_ + "/log/node.log") + ReadAll(dir_ + "/stdout"); }

 private:
  bool Prepare(std::string *error) {
    Stop();
    ports_.amqp = FreePort();
    ports_.amqps = tls_ ? FreePort() : 0;
    ports_.epmd = FreePort();
    ports_.dist = FreePort();
    std::filesystem::create_directories(dir_ + "/home");
    std::filesystem::create_directories(dir_ + "/log");
    std::filesystem::create_directories(dir_ + "/mnesia");
    if (tls_ && !std::filesystem::exists(dir_ + "/server.pem") &&
        !test_support::MakeCertificates(dir_)) {
      // No openssl command: no TLS listener (the TLS tests skip).
      tls_ = false;
      ports_.amqps = 0;
    }
    std::string conf = "listeners.tcp.default = 127.0.0.1:" + std::to_string(ports_.amqp) + "\n";
    if (tls_) {
      conf += "listeners.ssl.default = 127.0.0.1:" + std::to_string(ports_.amqps) + "\n";
      conf += "ssl_options.cacertfile = " + dir_ + "/ca.pem\n";
      conf += "ssl_options.certfile = " + dir_ + "/server.pem\n";
      conf += "ssl_options.keyfile = " + dir_ + "/server.key\n";
      conf += "ssl_options.verify = verify_none\n";
      conf += "ssl_options.fail_if_no_peer_cert = false\n";
    }
    // A test machine's disk may be nearly full; the tests that want an
    // alarm set their own limit below.
    conf += "disk_free_limit.absolute = 1MB\n";
    conf += "log.file.level = info\n";
    conf += conf_;
    return WriteAll(dir_ + "/rabbitmq.conf", conf) &&
           WriteAll(dir_ + "/enabled_plugins", "[].\n") &&
           WriteAll(dir_ + "/rabbitmq-env.conf", "");
  }

  std::vector<std::string> Environment() const {
    const char *path = std::getenv("PATH");
    const std::string d = dir_;
    return {
        "PATH=" + std::string(path != nullptr ? path : "/usr/bin:/bin"),
        "HOME=" + d + "/home",  // the Erlang cookie
        "LANG=C.UTF-8",
        "LC_ALL=C.UTF-8",
        "ERL_EPMD_PORT=" + std::to_string(ports_.epmd),
        "ERL_CRASH_DUMP=" + d + "/erl_crash.dump",
        "RABBITMQ_NODENAME=" + name_ + "@localhost",
        "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
        "RABBITMQ_NODE_PORT=" + std::to_string(ports_.amqp),
        "RABBITMQ_DIST_PORT=" + std::to_string(ports_.dist),
        "RABBITMQ_CONF_ENV_FILE=" + d + "/rabbitmq-env.conf",
        "RABBITMQ_CONFIG_FILE=" + d + "/rabbitmq",
        "RABBITMQ_ADVANCED_CONFIG_FILE=" + d + "/advanced.config",
        "RABBITMQ_ENABLED_PLUGINS_FILE=" + d + "/enabled_plugins",
        "RABBITMQ_MNESIA_BASE=" + d + "/mnesia",
        "RABBITMQ_LOG_BASE=" + d + "/log",
        "RABBITMQ_LOGS=" + d + "/log/node.log",
        "RABBITMQ_PID_FILE=" + d + "/node.pid",
        "RABBITMQ_ALLOW_INPUT=1",
        "RABBITMQ_SERVER_START_ARGS=-noinput",
    };
  }

  // fork + exec with the node's environment, in its directory, output to
  // its log; the child dies with us.
  pid_t Spawn(const std::vector<std::string> &args, const std::string &out) const {
    std::vector<std::string> env = Environment();
    std::vector<char *> argv;
    std::vector<char *> envp;
    std::vector<std::string> args_copy = args;
    for (std::string &a : args_copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string &e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const std::string dir = dir_;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);  // the parent died already
      if (chdir(dir.c_str()) != 0) _exit(127);
      const int in = open("/dev/null", O_RDONLY);
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      if (in >= 0) dup2(in, STDIN_FILENO);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    return pid;
  }

  bool Launch(std::string *error) {
    if (epmd_ <= 0) {
      // In the foreground (no -daemon), so it is ours to stop.
      epmd_ = Spawn({"/usr/bin/epmd", "-port", std::to_string(ports_.epmd)}, dir_ + "/epmd.log");
    }
    node_ = Spawn({"/usr/lib/rabbitmq/bin/rabbitmq-server"}, dir_ + "/stdout");
    if (node_ <= 0) {
      *error = "cannot start rabbitmq-server";
      return false;
    }
    // Boot takes 5 to 15 s on a loaded machine; the deadline is generous.
    const auto start = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - start < std::chrono::seconds(180)) {
      int status = 0;
      if (waitpid(node_, &status, WNOHANG) == node_) {
        node_ = 0;
        *error = "rabbitmq-server exited: " + Log();
        return false;
      }
      if (AmqpAnswers(ports_.amqp)) {
        started_once_ = true;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    *error = "rabbitmq-server did not answer within 180 s: " + Log();
    return false;
  }

  std::string conf_;
  bool tls_ = false;
  std::string dir_;
  std::string name_;
  Ports ports_;
  pid_t node_ = 0;
  pid_t epmd_ = 0;
  bool started_once_ = false;
  bool remove_dir_ = true;
};

// What the shared node is configured with: a 1 MiB limit on a message (the
// tests of too large messages send more), and a TLS listener.
inline const char *SharedNodeConf() { return "max_message_size = 1048576\n"; }

// The shared node's address, as the tests use it.
struct SharedNodeInfo {
  bool ok = false;
  std::string error;
  RabbitNode::Ports ports;
  std::string ca_pem;
};

namespace detail {

// The ctest process this test runs under (its parent), with its start time
// (so a reused pid is never mistaken for it); 0 when the parent is not ctest.
inline pid_t CtestAnchor(std::string *start_time) {
  const pid_t parent = getppid();
  std::string comm = ReadAll("/proc/" + std::to_string(parent) + "/comm");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  if (comm != "ctest") return 0;
  // Field 22 of /proc/<pid>/stat, after the parenthesised command name.
  const std::string stat = ReadAll("/proc/" + std::to_string(parent) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(stat.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (fields >> field); ++i) {
  }
  *start_time = field;
  return parent;
}

inline std::string PortsText(const RabbitNode::Ports &p) {
  return std::to_string(p.amqp) + " " + std::to_string(p.amqps) + " " + std::to_string(p.epmd) +
         " " + std::to_string(p.dist) + "\n";
}

// Blocks until `anchor` exits: a pidfd becomes readable then.
inline void WaitForExit(pid_t anchor) {
  const int fd = static_cast<int>(syscall(SYS_pidfd_open, anchor, 0));
  if (fd >= 0) {
    pollfd p{fd, POLLIN, 0};
    while (poll(&p, 1, -1) < 0 && errno == EINTR) {
    }
    close(fd);
    return;
  }
  while (kill(anchor, 0) == 0 || errno == EPERM) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// Under ctest: find the node of this ctest run, or start it under a
// watchdog that stops it when ctest exits.
inline SharedNodeInfo ShareWithCtest(pid_t anchor, const std::string &start_time) {
  SharedNodeInfo info;
  const char *tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                          "/outbox-amqp-unit-" + std::to_string(getuid()) + "-" +
                          std::to_string(anchor) + "-" + start_time;
  mkdir(dir.c_str(), 0700);
  const int lock = open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0 || flock(lock, LOCK_EX) != 0) {
    info.error = "cannot lock " + dir;
    if (lock >= 0) close(lock);
    return info;
  }
  const std::string ports_file = dir + "/node/ports";
  auto read_ports = [&] {
    std::istringstream in(ReadAll(ports_file));
    RabbitNode::Ports p;
    if (in >> p.amqp >> p.amqps >> p.epmd >> p.dist) info.ports = p;
    return p.amqp != 0;
  };
  if (read_ports() && AmqpAnswers(info.ports.amqp)) {
    info.ok = true;
  } else {
    std::error_code ignored;
    std::filesystem::remove_all(dir + "/node", ignored);
    const pid_t watchdog = fork();
    if (watchdog == 0) {
      // The watchdog: a session of its own (ctest's signals to the test's
      // group miss it), nothing of ctest's pipes kept open (ctest reads a
      // test's output until every writer closed it), the node as its child.
      setsid();
      close(lock);
      const int null = open("/dev/null", O_RDWR);
      const int log = open((dir + "/watchdog.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      dup2(null, STDIN_FILENO);
      dup2(log >= 0 ? log : null, STDOUT_FILENO);
      dup2(log >= 0 ? log : null, STDERR_FILENO);
      int code = 1;
      {
        RabbitNode node(SharedNodeConf(), /*tls=*/true, dir + "/node");
        std::string error;
        if (node.Start(&error)) {
          WriteAll(ports_file + ".new", PortsText(node.ports()));
          std::rename((ports_file + ".new").c_str(), ports_file.c_str());
          WaitForExit(anchor);
          code = 0;
        } else {
          std::fprintf(stderr, "%s\n", error.c_str());
        }
        node.Stop();
      }
      std::error_code gone;
      std::filesystem::remove_all(dir, gone);
      _exit(code);
    }
    // Until the watchdog's node answers, or the watchdog gave up.
    while (watchdog > 0) {
      if (read_ports()) {
        info.ok = true;
        break;
      }
      if (waitpid(watchdog, nullptr, WNOHANG) == watchdog) {
        info.error = "the shared RabbitMQ node did not start: " + ReadAll(dir + "/watchdog.log");
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  info.ca_pem = ReadAll(dir + "/node/ca.pem");
  flock(lock, LOCK_UN);
  close(lock);
  return info;
}

// Outside ctest: the node belongs to this process and stops with it (at
// exit, and by PR_SET_PDEATHSIG should the process die).
class OwnNode : public ::testing::Environment {
 public:
  void TearDown() override { node_.reset(); }
  SharedNodeInfo Get() {
    if (!started_) {
      started_ = true;
      node_ = std::make_unique<RabbitNode>(SharedNodeConf(), /*tls=*/true);
      info_.ok = node_->Start(&info_.error);
      info_.ports = node_->ports();
      info_.ca_pem = node_->ca_pem();
    }
    return info_;
  }

 private:
  bool started_ = false;
  std::unique_ptr<RabbitNode> node_;
  SharedNodeInfo info_;
};

inline OwnNode *OwnNodeEnvironment() {
  // gtest owns and deletes registered environments.
  static OwnNode *env = static_cast<OwnNode *>(::testing::AddGlobalTestEnvironment(new OwnNode));
  return env;
}

}  // namespace detail

// The node the tests share, started on first use (see the header).
inline const SharedNodeInfo &SharedRabbitNode() {
  static const SharedNodeInfo info = [] {
    std::string start_time;
    const pid_t anchor = detail::CtestAnchor(&start_time);
    if (anchor > 0) return detail::ShareWithCtest(anchor, start_time);
    return detail::OwnNodeEnvironment()->Get();
  }();
  return info;
}

}  // namespace amqp_test
}  // namespace outbox
