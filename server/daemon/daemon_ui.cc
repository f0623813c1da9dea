// What is for operators: the admin token (--admin-token-file), the top offenders' counting, and
// the operator's page (--ui), made over the API, with its charts sampled every second.

#include <chrono>
#include <memory>

#include "fmt/format.h"

#include "server/daemon/daemon.h"
#include "src/core/status.h"

namespace sluice::server {

absl::Status Daemon::SetUpAdmin() {
  if (!flags_.admin_token_file.empty()) {
    absl::StatusOr<AdminToken> admin = AdminToken::FromFile(flags_.admin_token_file);
    if (!admin.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("--admin-token-file: {}", internal::Message(admin.status())));
    }
    api_->SetAdminToken(*admin);
    if (flags_.ui) {
      MakeOperatorPage(*admin);
    }
  } else if (flags_.ui) {
    return absl::InvalidArgumentError(
        "--ui: the operator's page shows others' keys: it needs --admin-token-file (its token "
        "is the page's password)");
  }
  // Top offenders are counted where someone can see them: GET /v1/top (the admin token), or
  // /metrics (--top-metrics).
  metrics_.top().Enable(!flags_.admin_token_file.empty() || flags_.top_metrics > 0);
  return absl::OkStatus();
}

void Daemon::MakeOperatorPage(const AdminToken& admin) {
  page_ =
      std::make_unique<OperatorPage>(*api_, *service_, history_, metrics_, admin, SystemClock());
}

void Daemon::SampleHistory() {
  history_.Sample(metrics_.rules(), SystemClock().Now());
  // From the steady clock's next whole second: one sample a second, not drifting later.
  const auto now = std::chrono::steady_clock::now();
  history_timer_.expires_at(
      std::chrono::ceil<std::chrono::seconds>(now + std::chrono::milliseconds(1)));
  history_timer_.async_wait([this](const boost::system::error_code& ec) {
    if (!ec) {
      SampleHistory();
    }
  });
}

}  // namespace sluice::server
