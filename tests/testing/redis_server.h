#pragma once

// A real redis-server (Debian's), started by a test on a loopback port it picks and on a unix
// socket in a directory of its own, with persistence off. Stop() ends it (SIGTERM), Kill()
// crashes it (SIGKILL: no goodbye to its replicas), Pause()/Resume() freeze it
// (SIGSTOP/SIGCONT) to make it miss deadlines, Start() brings it back on the same port. And
// Client, a blocking hiredis connection for a test to look inside.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include <hiredis/hiredis.h>

namespace sluice::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// Whether `port` on 127.0.0.1 can be bound now.
inline bool PortIsFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool free = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return free;
}

// Whether process `pid` holds the socket listening on 127.0.0.1:`port` (Linux's /proc). Tests
// run side by side and pick free ports: another's server may take a port first, and then
// answers on it while this one fails to bind, so a server counts as started only once it
// holds its port.
inline bool Listens(pid_t pid, int port) {
  char local[32];
  snprintf(local, sizeof local, "0100007F:%04X", port);
  std::vector<std::string> sockets;
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // The heading.
  while (std::getline(tcp, line)) {
    std::istringstream fields(line);
    std::string slot, address, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> slot >> address >> remote >> state >> queues >> timer >> retransmits >> uid >>
        timeout >> inode;
    if (address == local && state == "0A") {  // 0A: LISTEN.
      sockets.push_back("socket:[" + inode + "]");
    }
  }
  std::error_code ec;
  const std::filesystem::path fds = "/proc/" + std::to_string(pid) + "/fd";
  for (const auto& fd : std::filesystem::directory_iterator(fds, ec)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (std::find(sockets.begin(), sockets.end(), target) != sockets.end()) {
      return true;
    }
  }
  return false;
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

// A blocking connection for looking at what the store wrote.
class Client {
 public:
  explicit Client(int port) {
    timeval timeout{.tv_sec = 2, .tv_usec = 0};
    context_ = redisConnectWithTimeout("127.0.0.1", port, timeout);
  }
  ~Client() {
    if (context_ != nullptr) {
      redisFree(context_);
    }
  }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  bool ok() const { return context_ != nullptr && context_->err == 0; }

  // Runs a command given as separate arguments; nullptr when the connection failed.
  Reply Run(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<size_t> lengths;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lengths.push_back(a.size());
    }
    return Reply(static_cast<redisReply*>(
        redisCommandArgv(context_, static_cast<int>(args.size()), argv.data(), lengths.data())));
  }

 private:
  redisContext* context_ = nullptr;
};

class RedisServer {
 public:
  // `extra`: more redis-server arguments ("--requirepass", "secret"). `config`: a config file
  // to read first, for what only a file can say (a sentinel's, which it rewrites: `extra`
  // then holds "--sentinel").
  explicit RedisServer(std::vector<std::string> extra = {}, std::filesystem::path config = {})
      : extra_(std::move(extra)), config_(std::move(config)) {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-redis-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    for (int attempt = 0; attempt < 5; ++attempt) {  // Another test may take the port first.
      port_ = FreePort();
      if (std::find(extra_.begin(), extra_.end(), "--cluster-enabled") != extra_.end()) {
        // A cluster node also listens on port + 10000 (its bus): both must be valid and free.
        while (port_ == 0 || port_ + 10000 > 65535 || !PortIsFree(port_ + 10000)) {
          port_ = FreePort();
        }
      }
      if (TryStart()) {
        return;
      }
    }
    FailToStart();
  }
  ~RedisServer() {
    Stop();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return port_; }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_); }
  std::string socket() const { return (dir_ / "redis.sock").string(); }
  std::string unix_url() const { return "unix://" + socket(); }
  const std::filesystem::path& dir() const { return dir_; }

  // Starts it (again, on the same port) and waits until it answers PING.
  void Start() {
    if (!TryStart()) {
      FailToStart();
    }
  }

  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGCONT);
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
      pid_ = 0;
    }
  }
  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = 0;
    }
  }
  void Pause() { kill(pid_, SIGSTOP); }
  void Resume() { kill(pid_, SIGCONT); }

 private:
  // Starts it on port_; false if it exited (another process holds the port) or did not answer
  // in time.
  bool TryStart() {
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--dir",
                                     dir_.string(),
                                     "--loglevel",
                                     "warning",
                                     "--logfile",
                                     (dir_ / "redis.log").string(),
                                     "--unixsocket",
                                     socket(),
                                     "--unixsocketperm",
                                     "700"};
    if (!config_.empty()) {
      args.insert(args.begin() + 1, config_.string());
    }
    args.insert(args.end(), extra_.begin(), extra_.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) {
        argv.push_back(a.data());
      }
      argv.push_back(nullptr);
      execvp("redis-server", argv.data());
      _exit(127);
    }
    for (int i = 0; i < 6000; ++i) {  // A watchdog of 60 s: a loaded machine starts slowly.
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {  // It exited (the port was taken).
        pid_ = 0;
        return false;
      }
      if (Client client(port_); client.ok() && Listens(pid_, port_)) {
        Reply r = client.Run({"PING"});
        if (r && (r->type == REDIS_REPLY_STATUS ||
                  (r->type == REDIS_REPLY_ERROR && std::string(r->str).starts_with("NOAUTH")))) {
          return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill();
    return false;
  }

  void FailToStart() {
    std::ostringstream log;  // Its reason, before the directory goes with the test.
    log << std::ifstream(dir_ / "redis.log").rdbuf();
    ADD_FAILURE() << "redis-server did not start on port " << port_ << ":\n" << log.str();
  }

  static inline int counter_ = 0;
  std::vector<std::string> extra_;
  std::filesystem::path config_;
  std::filesystem::path dir_;
  int port_ = 0;
  pid_t pid_ = 0;
};

}  // namespace sluice::testing
