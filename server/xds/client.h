#pragma once

// xds::Client: sluiced's rules from an xDS management server, as envoyproxy/ratelimit takes
// them with CONFIG_TYPE=GRPC_XDS_SOTW (and as Envoy Gateway serves them): one aggregated
// discovery stream (ADS, state of the world) subscribed to every RateLimitConfig resource for
// this node; each response is the whole set of rules, handed to `apply`; the stream then says
// whether it was taken (ACK: its version and nonce) or refused (NACK: the version last taken,
// the nonce, and apply's error as the reason), as go-control-plane's ADS client says it. A
// stream that ends or cannot start is opened again after a backoff that grows from
// backoff_initial to backoff_max, with random jitter, and starts again from backoff_initial
// once a response arrives.
//
// Thread-safe: the stream runs on a thread of the client's own, which calls `apply`; Stop (or
// the destructor) ends it from any thread, cancelling a stream in progress.

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "envoy/service/discovery/v3/discovery.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/security/credentials.h"

#include "sluice/duration.h"

namespace sluice::server::xds {

// Their CONFIG_GRPC_XDS_* and XDS_CLIENT_* settings, one field each.
struct Options {
  std::string server;               // HOST:PORT (CONFIG_GRPC_XDS_SERVER_URL).
  std::string node_id = "default";  // CONFIG_GRPC_XDS_NODE_ID.
  std::vector<std::pair<std::string, std::string>> node_metadata;  // ..._NODE_METADATA.
  std::vector<std::pair<std::string, std::string>> headers;        // ..._CLIENT_ADDITIONAL_HEADERS.
  bool tls = false;             // CONFIG_GRPC_XDS_SERVER_USE_TLS.
  std::string tls_ca_file;      // ..._SERVER_TLS_CACERT; empty: the system's CAs.
  std::string tls_cert_file;    // ..._CLIENT_TLS_CERT, with its key: a client certificate.
  std::string tls_key_file;     // ..._CLIENT_TLS_KEY.
  std::string tls_server_name;  // ..._SERVER_TLS_SAN: the name the server's cert must show.
  Micros backoff_initial = std::chrono::seconds(10);  // XDS_CLIENT_BACKOFF_INITIAL_INTERVAL.
  Micros backoff_max = std::chrono::seconds(60);      // XDS_CLIENT_BACKOFF_MAX_INTERVAL.
  double backoff_random_factor = 0.5;                 // XDS_CLIENT_BACKOFF_RANDOM_FACTOR.
  bool backoff_jitter = true;                         // XDS_CLIENT_BACKOFF_JITTER.
  int max_message_bytes = 0;  // XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES; 0: gRPC's (4 MiB).
};

// Parses their "k1=v1,k2=v2" (node metadata; an entry without '=' is skipped, as theirs) or
// "k1:v1,k2:v2" (headers, envconfig's map: an entry without ':' is an error), with `separator`.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParsePairs(std::string_view text,
                                                                            char separator,
                                                                            bool skip_malformed);

class Client {
 public:
  // The rules of one response: (resource name, YAML text) pairs, and the response's version.
  // OK: they are in force (ACK); an error: they were refused and the rules in force kept (NACK
  // with the error's message).
  using Apply = std::function<absl::Status(
      const std::vector<std::pair<std::string, std::string>>& files, const std::string& version)>;

  // Checks `options` (TLS files read; InvalidArgument naming a bad one) and starts the stream.
  static absl::StatusOr<std::unique_ptr<Client>> Start(Options options, Apply apply);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Ends the stream and the thread; returns once `apply` can no longer be called.
  void Stop();

  // The wait before the attempt after `failures` failed ones in a row (1 for the first retry).
  static Micros Backoff(const Options& options, int failures, std::mt19937_64& random);

 private:
  Client(Options options, Apply apply, std::shared_ptr<grpc::ChannelCredentials> credentials);
  void Run();
  // One stream, from its opening to its end; returns whether a response arrived.
  bool Stream();
  // A response's set handed to apply_: its result, or why it was not (the NACK's reason).
  absl::Status Take(const envoy::service::discovery::v3::DiscoveryResponse& response);
  // Waits `delay` unless stopped first; returns false when stopped.
  bool Sleep(Micros delay);

  const Options options_;
  const Apply apply_;
  const std::shared_ptr<grpc::ChannelCredentials> credentials_;
  std::string version_;  // The version last taken (ACKed); the client's thread's alone.

  std::mutex mutex_;
  bool stopping_ = false;                  // Guarded.
  grpc::ClientContext* stream_ = nullptr;  // Guarded: the stream open now, to cancel.
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace sluice::server::xds
