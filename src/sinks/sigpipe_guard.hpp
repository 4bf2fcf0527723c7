// Blocking SIGPIPE around a sink's socket I/O: for any sink that writes to a
// socket, itself or through a client library. No PostgreSQL header here.
#pragma once

#include <signal.h>

namespace outbox {

// Writing to a connection the server has closed raises SIGPIPE, whose default
// action ends the process. PostgreSQL's processes ignore it, but a sink must
// not rely on its owner: as libpq does, SIGPIPE is blocked in this thread
// while we do I/O, and one that our writes raised is consumed before the old
// mask returns.
class SigpipeGuard {
 public:
  SigpipeGuard() noexcept;
  ~SigpipeGuard();
  SigpipeGuard(const SigpipeGuard &) = delete;
  SigpipeGuard &operator=(const SigpipeGuard &) = delete;

 private:
  static bool Pending();

  sigset_t pipe_;
  sigset_t old_;
  bool blocked_ = false;
  bool was_pending_ = false;
};

}  // namespace outbox
