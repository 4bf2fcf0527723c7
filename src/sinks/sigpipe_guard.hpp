// Blocking SIGPIPE around a sink's socket I/O: for any sink that writes to a
// socket, itself or through a client library; and every signal while a
// client library may start threads. No PostgreSQL header here.
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

// Every signal blocked in this thread for as long as it lives, so that the
// threads a client library starts meanwhile (libnats's, libcurl's threaded
// resolver) inherit a mask that blocks them all: a signal sent to the
// process is then run on the owner's thread (PostgreSQL's handlers expect
// that), never on one of the library's. Signals arriving meanwhile wait and
// are delivered when the old mask returns. Synchronous signals (a fault in
// the thread itself) cannot be blocked usefully and are left alone.
class LibraryThreadsStartGuard {
 public:
  LibraryThreadsStartGuard() noexcept;
  ~LibraryThreadsStartGuard();
  LibraryThreadsStartGuard(const LibraryThreadsStartGuard &) = delete;
  LibraryThreadsStartGuard &operator=(const LibraryThreadsStartGuard &) = delete;

 private:
  sigset_t old_;
  bool blocked_ = false;
};

}  // namespace outbox
