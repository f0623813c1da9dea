#include "server/stats/statsd.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <utility>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace sluice::server {
namespace {

// The smallest max_datagram taken: room for a name of some length and its value.
constexpr size_t kMinDatagram = 64;

// How much the running total `total` grew since `last`, which becomes it. A running total
// never shrinks; if it did, all of it is new.
uint64_t Growth(uint64_t& last, uint64_t total) {
  const uint64_t grew = total >= last ? total - last : total;
  last = total;
  return grew;
}

// A UDP socket connected to host:port (send() then needs no address), and the address as text.
absl::StatusOr<std::pair<int, std::string>> Connect(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::InvalidArgumentError(
        fmt::format("statsd host '{}' does not resolve: {}", host, gai_strerror(rc)));
  }
  std::string why = "no address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      why = std::strerror(errno);
      close(fd);
      continue;
    }
    char address[NI_MAXHOST] = "";
    getnameinfo(a->ai_addr, a->ai_addrlen, address, sizeof(address), nullptr, 0, NI_NUMERICHOST);
    freeaddrinfo(found);
    const bool v6 = std::strchr(address, ':') != nullptr;
    return std::pair(
        fd, v6 ? fmt::format("[{}]:{}", address, port) : fmt::format("{}:{}", address, port));
  }
  freeaddrinfo(found);
  return absl::InternalError(fmt::format("statsd {}:{}: no UDP socket: {}", host, port, why));
}

}  // namespace

absl::StatusOr<std::unique_ptr<StatsdSink>> StatsdSink::Start(StatsdOptions options,
                                                              Source source) {
  if (options.port == 0) {
    return absl::InvalidArgumentError("statsd port must not be 0");
  }
  if (options.interval <= Micros{0}) {
    return absl::InvalidArgumentError("statsd interval must be positive");
  }
  if (options.max_datagram < kMinDatagram) {
    return absl::InvalidArgumentError(
        fmt::format("statsd datagrams must allow at least {} bytes", kMinDatagram));
  }
  absl::StatusOr<std::pair<int, std::string>> connected = Connect(options.host, options.port);
  if (!connected.ok()) {
    return connected.status();
  }
  auto [fd, destination] = *std::move(connected);
  std::unique_ptr<StatsdSink> sink(
      new StatsdSink(std::move(options), std::move(source), fd, std::move(destination)));
  sink->thread_ = std::thread([raw = sink.get()] { raw->Run(); });
  return sink;
}

StatsdSink::StatsdSink(StatsdOptions options, Source source, int fd, std::string destination)
    : options_(std::move(options)),
      source_(std::move(source)),
      fd_(fd),
      destination_(std::move(destination)) {}

StatsdSink::~StatsdSink() {
  Stop();
  close(fd_);
}

void StatsdSink::Stop() {
  {
    std::lock_guard lock(stop_mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

void StatsdSink::Run() {
  auto next = std::chrono::steady_clock::now() + options_.interval;
  for (;;) {
    bool last = false;
    {
      std::unique_lock lock(stop_mutex_);
      last = stop_cv_.wait_until(lock, next, [this] { return stopping_; });
    }
    // The exceptions a flush may meet (memory exhausted) cost a flush, not the server.
    try {
      Flush();
    } catch (const std::exception& e) {
      spdlog::error("statsd: a flush failed: {}", e.what());
    }
    if (last) {
      return;
    }
    // The next flush an interval after this one was due; after a late one (a machine that
    // stalled), an interval from now rather than several at once.
    next = std::max(next + options_.interval, std::chrono::steady_clock::now());
  }
}

void StatsdSink::AddTimerLines(const Stat& stat, std::vector<std::string>& lines) {
  for (size_t i = 0; i < stat.samples.size(); ++i) {
    const auto& [ms, total] = stat.samples[i];
    const uint64_t grew = Growth(last_[fmt::format("{}#{}", stat.name, i)], total);
    if (grew == 0) {
      continue;
    }
    // One sample standing for `grew` (statsd's sample rate, 1/grew): statsd and
    // statsd_exporter count it `grew` times.
    std::string line = grew == 1 ? fmt::format("{}:{}|ms\n", stat.name, ms)
                                 : fmt::format("{}:{}|ms|@{:.9g}\n", stat.name, ms,
                                               1.0 / static_cast<double>(grew));
    if (line.size() <= options_.max_datagram) {
      lines.push_back(std::move(line));
    }
  }
}

std::vector<std::string> StatsdSink::Lines() {
  std::vector<std::string> lines;
  for (const Stat& stat : source_()) {
    if (stat.kind == Stat::Kind::kTimer) {
      AddTimerLines(stat, lines);
      continue;
    }
    uint64_t value = stat.value;
    if (stat.kind == Stat::Kind::kCounter) {
      value = Growth(last_[stat.name], stat.value);
      if (value == 0) {
        continue;  // As gostats: a counter that did not grow is not sent.
      }
    }
    std::string line =
        fmt::format("{}:{}|{}\n", stat.name, value, stat.kind == Stat::Kind::kGauge ? 'g' : 'c');
    if (line.size() > options_.max_datagram) {
      if (!warned_long_) {
        warned_long_ = true;
        spdlog::warn("statsd: '{}' makes a line over {} bytes: not sent (nor any such line)",
                     stat.name.substr(0, 200), options_.max_datagram);
      }
      continue;
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

size_t StatsdSink::Flush() {
  internal::MutexLock lock(flush_mutex_);
  size_t sent = 0;
  std::string datagram;
  for (const std::string& line : Lines()) {
    if (datagram.size() + line.size() > options_.max_datagram) {
      sent += Send(datagram) ? 1 : 0;
      datagram.clear();
    }
    datagram += line;
  }
  if (!datagram.empty()) {
    sent += Send(datagram) ? 1 : 0;
  }
  return sent;
}

bool StatsdSink::Send(const std::string& datagram) {
  ssize_t n = send(fd_, datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n < 0 && errno == ECONNREFUSED) {
    // An earlier datagram found no statsd listening (ICMP port unreachable); reported now, it
    // cost this one nothing yet: sent again, it goes (and is lost, as UDP's are, if no one
    // listens still).
    n = send(fd_, datagram.data(), datagram.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  if (n == static_cast<ssize_t>(datagram.size())) {
    return true;
  }
  ++failures_;
  const auto now = std::chrono::steady_clock::now();
  if (failures_ == 1 || now - last_warning_ >= kWarningEvery) {
    last_warning_ = now;
    spdlog::warn("statsd: sending to {} failed ({}); {} datagram(s) lost so far", destination_,
                 n < 0 ? std::strerror(errno) : "cut short", failures_);
  }
  return false;
}

}  // namespace sluice::server
