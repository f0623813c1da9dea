// Rules from an xDS management server (--xds, their CONFIG_TYPE=GRPC_XDS_SOTW): the client
// started with the flags' options, each pushed set put in force as a reload's files would be
// (the same parse, the keys' counts kept, a refused set leaving the rules in force), and the
// wait for the first set before anything is served, as theirs waits unless
// FORCE_START_WITHOUT_INITIAL_CONFIG.

#include <chrono>
#include <csignal>
#include <functional>
#include <tuple>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "server/daemon/daemon.h"
#include "src/core/status.h"

namespace sluice::server {

std::string Daemon::RulesSource() const {
  if (!flags_.xds.empty()) {
    return fmt::format("xDS at {}", flags_.xds);
  }
  return flags_.config.empty() ? "no config" : flags_.config;
}

absl::Status Daemon::StartXds() {
  if (flags_.xds.empty()) {
    return absl::OkStatus();
  }
  if (!flags_.config.empty()) {
    return absl::InvalidArgumentError(
        fmt::format("--xds {} and --config {}: the rules come from one or the other", flags_.xds,
                    flags_.config));
  }
  xds::Options options = flags_.xds_options;
  options.server = flags_.xds;
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> metadata =
      xds::ParsePairs(flags_.xds_node_metadata, '=', /*skip_malformed=*/true);
  absl::StatusOr<std::vector<std::pair<std::string, std::string>>> headers =
      xds::ParsePairs(flags_.xds_headers, ':', /*skip_malformed=*/false);
  if (!headers.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--xds-headers: {}", internal::Message(headers.status())));
  }
  options.node_metadata = *std::move(metadata);
  options.headers = *std::move(headers);
  for (const auto& [flag, text, into] :
       {std::tuple{"--xds-backoff-initial", &flags_.xds_backoff_initial, &options.backoff_initial},
        std::tuple{"--xds-backoff-max", &flags_.xds_backoff_max, &options.backoff_max}}) {
    absl::StatusOr<Micros> parsed = ParseDuration(*text);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("{}: {}", flag, internal::Message(parsed.status())));
    }
    *into = *parsed;
  }
  absl::StatusOr<std::unique_ptr<xds::Client>> client = xds::Client::Start(
      std::move(options), [this](const std::vector<std::pair<std::string, std::string>>& files,
                                 const std::string& version) { return ApplyXds(files, version); });
  if (!client.ok()) {
    return client.status();
  }
  xds_ = *std::move(client);
  return absl::OkStatus();
}

bool Daemon::AwaitFirstXdsSet(boost::asio::signal_set& signals) {
  if (xds_ == nullptr || flags_.xds_force_start) {
    return true;
  }
  spdlog::info("waiting for the first set of rules from xDS at {} before serving", flags_.xds);
  bool stop = false;
  std::function<void()> arm = [&] {
    signals.async_wait([&](const boost::system::error_code& ec, int signal) {
      if (ec) {
        return;  // Cancelled below: the first set came.
      }
      if (signal == SIGHUP && xds_in_force_.load()) {
        return;  // Run by the loop's last run below: the wait is over, nothing to wait on.
      }
      if (signal == SIGHUP) {
        spdlog::warn("SIGHUP: the rules come from xDS; nothing to reload");
        arm();
        return;
      }
      spdlog::info("received {}", signal == SIGTERM ? "SIGTERM" : "SIGINT");
      stop = true;
    });
  };
  arm();
  // The client's thread sets xds_in_force_; the control loop looks every 50 ms.
  while (!stop && !xds_in_force_.load()) {
    control_.run_for(std::chrono::milliseconds(50));
  }
  signals.cancel();
  control_.run();  // The cancelled wait's handler; then the loop is out of work.
  control_.restart();
  if (stop) {
    xds_->Stop();
    spdlog::info("stopped before the first set of rules from xDS");
  }
  return !stop;
}

void Daemon::StopXds() {
  if (xds_ != nullptr) {
    xds_->Stop();
  }
}

absl::Status Daemon::ApplyXds(const std::vector<std::pair<std::string, std::string>>& files,
                              const std::string& version) {
  absl::StatusOr<std::shared_ptr<const RuleSet>> rules = LoadRules(&files);
  if (!rules.ok()) {
    metrics_.CountReload(false);
    spdlog::error("xDS: version '{}' refused (NACK), keeping the rules in force: {}", version,
                  internal::Message(rules.status()));
    return rules.status();
  }
  service_->SetRules(*std::move(rules));
  metrics_.CountReload(true);
  spdlog::info("xDS: version '{}' in force (ACK): {} resource(s), {} domain(s)", version,
               files.size(), service_->rules()->domains().size());
  xds_in_force_.store(true);
  return absl::OkStatus();
}

}  // namespace sluice::server
