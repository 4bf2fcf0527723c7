// SIGPIPE around a sink's socket I/O (sinks/sigpipe_guard.hpp): a write to a
// closed connection must not end the process, whatever its owner's handler.
#include "sinks/sigpipe_guard.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

namespace outbox {
namespace {

bool PipePending() {
  sigset_t pending;
  sigemptyset(&pending);
  return sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1;
}

bool PipeBlocked() {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return sigismember(&mask, SIGPIPE) == 1;
}

// Writes to a socket whose peer is closed: EPIPE, and SIGPIPE for this thread.
int WriteToClosedSocket() {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) return errno;
  close(fds[1]);
  const char byte = 'x';
  const ssize_t written = write(fds[0], &byte, 1);
  const int err = written < 0 ? errno : 0;
  close(fds[0]);
  return err;
}

TEST(SigpipeGuard, AWriteToAClosedConnectionRaisesNoSignalAndTheMaskComesBack) {
  // SIGPIPE's default action: without the guard this process would end.
  signal(SIGPIPE, SIG_DFL);
  ASSERT_FALSE(PipeBlocked());
  {
    SigpipeGuard guard;
    EXPECT_TRUE(PipeBlocked());
    EXPECT_EQ(WriteToClosedSocket(), EPIPE);
  }
  EXPECT_FALSE(PipePending());
  EXPECT_FALSE(PipeBlocked());
}

TEST(SigpipeGuard, ASignalPendingBeforeTheGuardIsLeftForItsOwner) {
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &pipe, nullptr), 0);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGPIPE), 0);
  ASSERT_TRUE(PipePending());
  {
    SigpipeGuard guard;
    EXPECT_EQ(WriteToClosedSocket(), EPIPE);
  }
  EXPECT_TRUE(PipePending());
  EXPECT_TRUE(PipeBlocked());  // the owner's mask, as it was
  const timespec zero{0, 0};
  EXPECT_EQ(sigtimedwait(&pipe, nullptr, &zero), SIGPIPE);
  ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &pipe, nullptr), 0);
}

}  // namespace
}  // namespace outbox
