#pragma once

// A real memcached (Debian's), started by a test on a loopback port it picks, without UDP.
// Kill() ends it at once (SIGKILL: its items are lost, as in a crash); Start() brings it back,
// empty, on the same port.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

#include "tests/testing/redis_server.h"  // FreePort

namespace sluice::testing {

class MemcachedServer {
 public:
  MemcachedServer() {
    for (int attempt = 0; attempt < 5; ++attempt) {  // Another test may take the port first.
      port_ = FreePort();
      if (TryStart()) {
        return;
      }
    }
    ADD_FAILURE() << "memcached did not start on port " << port_;
  }
  ~MemcachedServer() { Kill(); }
  MemcachedServer(const MemcachedServer&) = delete;
  MemcachedServer& operator=(const MemcachedServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string url() const { return "memcached://" + address(); }

  // Starts it (again, on the same port) and waits until it accepts a connection.
  void Start() {
    if (!TryStart()) {
      ADD_FAILURE() << "memcached did not start on port " << port_;
    }
  }

  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = 0;
    }
  }
  // Freezes it (SIGSTOP): calls wait for it until their timeout; Resume() thaws it.
  void Pause() { kill(pid_, SIGSTOP); }
  void Resume() { kill(pid_, SIGCONT); }

 private:
  // Starts it on port_; false if it exited (another process holds the port) or did not
  // accept in time.
  bool TryStart() {
    pid_ = fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      // As root (a container), memcached wants a user to run as: itself.
      const char* user = geteuid() == 0 ? "root" : getenv("USER");
      execlp("memcached", "memcached", "-l", "127.0.0.1", "-p", port.c_str(), "-U", "0", "-m", "64",
             "-t", "2", "-u", user != nullptr ? user : "nobody", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 6000; ++i) {  // A watchdog of 60 s: a loaded machine starts slowly.
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {  // It exited: no point waiting.
        pid_ = 0;
        return false;
      }
      if (Accepts() && Listens(pid_, port_)) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill();
    return false;
  }

  bool Accepts() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    close(fd);
    return ok;
  }

  int port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace sluice::testing
