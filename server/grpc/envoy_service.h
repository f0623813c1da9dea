#pragma once

// EnvoyGrpcService: Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService,
// proto/ in this repository) over gRPC, as envoyproxy/ratelimit serves it, on top of
// RateLimitService::ShouldRateLimit. The /json endpoint answers the same questions in JSON.
//
// Thread-safe: gRPC calls it from its own threads. A call never holds a gRPC thread while the
// store decides: it finishes from the store's callback.

#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"

#include "server/service/rate_limit_headers.h"
#include "server/service/service.h"

namespace sluice::server {

// What the answers carry beyond the decision (the decision's own settings, SHADOW_MODE among
// them, are the service's: EnvoySettings).
struct EnvoyOptions {
  // envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED: the RateLimit headers of the
  // descriptor closest to its limit in response_headers_to_add. The default is theirs, exactly:
  // draft-06's three fields under the names of LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER,
  // LIMIT_RESET_HEADER, from the closest status as the response tells it (shadow mode
  // included; a reset even where no wait helps). --ratelimit-headers chooses one of sluice's
  // formats (rate_limit_headers.h), which tell the quota a client may spend and leave out
  // shadow-mode limits, as the HTTP API does.
  bool response_headers = false;
  HeaderOptions headers{.format = HeaderFormat::kDraft06};
  Clock* clock = nullptr;  // The wall clock of x-ratelimit's Reset; null: SystemClock().
  // RESPONSE_DYNAMIC_METADATA: the request and its rules' `metadata` in dynamic_metadata
  // (metadata.h).
  bool dynamic_metadata = false;
  // Where each ShouldRateLimit call is counted and timed (Metrics::grpc_calls); null: nowhere.
  Metrics* metrics = nullptr;
};

class EnvoyGrpcService final
    : public envoy::service::ratelimit::v3::RateLimitService::CallbackService {
 public:
  // `service` must outlive this.
  EnvoyGrpcService(RateLimitService& service, EnvoyOptions options);

  grpc::ServerUnaryReactor* ShouldRateLimit(
      grpc::CallbackServerContext* context,
      const envoy::service::ratelimit::v3::RateLimitRequest* request,
      envoy::service::ratelimit::v3::RateLimitResponse* response) override;

  // The call itself, for either engine: decides `request` into `response`, then calls `done`
  // with the call's status (OK, or the store's error), before returning or later on the
  // store's thread. `request` and `response` must live until then.
  using Done = absl::AnyInvocable<void(const absl::Status&) &&>;
  void Decide(const envoy::service::ratelimit::v3::RateLimitRequest& request,
              envoy::service::ratelimit::v3::RateLimitResponse& response, Done done);

 private:
  // The response to `request`, whose descriptors were decided as `results`.
  void Fill(const envoy::service::ratelimit::v3::RateLimitRequest& request,
            const std::vector<DescriptorResult>& results,
            envoy::service::ratelimit::v3::RateLimitResponse& response) const;
  // options_.clock, or SystemClock().
  Clock& WallClock() const;

  RateLimitService& service_;
  EnvoyOptions options_;
};

}  // namespace sluice::server
