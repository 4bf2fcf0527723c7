// Blocking SIGPIPE around a sink's socket I/O (sigpipe_guard.hpp).
#include "sinks/sigpipe_guard.hpp"

#include <pthread.h>
#include <signal.h>

#include <cerrno>
#include <ctime>
#include <initializer_list>

namespace outbox {

SigpipeGuard::SigpipeGuard() noexcept {
  sigemptyset(&pipe_);
  sigaddset(&pipe_, SIGPIPE);
  blocked_ = pthread_sigmask(SIG_BLOCK, &pipe_, &old_) == 0;
  was_pending_ = Pending();
}

SigpipeGuard::~SigpipeGuard() {
  if (!blocked_) return;
  if (!was_pending_ && Pending()) {
    const int saved = errno;
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
    }
    errno = saved;
  }
  pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

bool SigpipeGuard::Pending() {
  sigset_t pending;
  sigemptyset(&pending);
  return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

LibraryThreadsStartGuard::LibraryThreadsStartGuard() noexcept {
  sigset_t all;
  sigfillset(&all);
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT}) sigdelset(&all, sig);
  blocked_ = pthread_sigmask(SIG_BLOCK, &all, &old_) == 0;
}

LibraryThreadsStartGuard::~LibraryThreadsStartGuard() {
  if (blocked_) pthread_sigmask(SIG_SETMASK, &old_, nullptr);
}

}  // namespace outbox
