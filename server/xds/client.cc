#include "server/xds/client.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "envoy/service/discovery/v3/ads.grpc.pb.h"
#include "fmt/format.h"
#include "grpcpp/create_channel.h"
#include "spdlog/spdlog.h"

#include "server/xds/resources.h"
#include "src/tls/pem_files.h"

namespace sluice::server::xds {
namespace {

namespace discovery = envoy::service::discovery::v3;

constexpr int kInvalidArgument = 3;                         // google.rpc.Code.
constexpr size_t kMaxReason = 4096;                         // Bytes of a NACK's reason.
constexpr Micros kMinWait = std::chrono::milliseconds(10);  // However much jitter takes off.

std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const Options& options,
                                                            const tls::Pem& pem) {
  if (!options.tls) {
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = pem.ca;  // Empty: gRPC's default roots (the system's).
  ssl.pem_cert_chain = pem.cert_chain;
  ssl.pem_private_key = pem.key;
  return grpc::SslCredentials(ssl);
}

}  // namespace

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParsePairs(std::string_view text,
                                                                            char separator,
                                                                            bool skip_malformed) {
  std::vector<std::pair<std::string, std::string>> pairs;
  while (!text.empty()) {
    const size_t comma = text.find(',');
    const std::string_view entry = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
    if (entry.empty()) {
      continue;
    }
    const size_t at = entry.find(separator);
    if (at == std::string_view::npos) {
      if (skip_malformed) {
        continue;
      }
      return absl::InvalidArgumentError(fmt::format("'{}' is not KEY{}VALUE", entry, separator));
    }
    pairs.emplace_back(std::string(entry.substr(0, at)), std::string(entry.substr(at + 1)));
  }
  return pairs;
}

absl::StatusOr<std::unique_ptr<Client>> Client::Start(Options options, Apply apply) {
  if (options.server.empty()) {
    return absl::InvalidArgumentError("xDS: no management server (HOST:PORT) given");
  }
  if (options.backoff_initial <= Micros{0} || options.backoff_max < options.backoff_initial) {
    return absl::InvalidArgumentError(
        "xDS: the backoff's first wait must be above 0 and at most its longest");
  }
  if (!(options.backoff_random_factor >= 0 && options.backoff_random_factor <= 1)) {
    return absl::InvalidArgumentError("xDS: the backoff's random factor must be within [0, 1]");
  }
  tls::Pem pem;
  if (options.tls) {
    absl::StatusOr<tls::Pem> read = tls::ReadPemFiles({.cert_file = options.tls_cert_file,
                                                       .key_file = options.tls_key_file,
                                                       .ca_file = options.tls_ca_file},
                                                      "xDS TLS");
    if (!read.ok()) {
      return read.status();
    }
    pem = *std::move(read);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = ClientCredentials(options, pem);
  std::unique_ptr<Client> client(
      new Client(std::move(options), std::move(apply), std::move(credentials)));
  client->thread_ = std::thread([c = client.get()] { c->Run(); });
  return client;
}

Client::Client(Options options, Apply apply, std::shared_ptr<grpc::ChannelCredentials> credentials)
    : options_(std::move(options)),
      apply_(std::move(apply)),
      credentials_(std::move(credentials)) {}

Client::~Client() { Stop(); }

void Client::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    if (stream_ != nullptr) {
      stream_->TryCancel();
    }
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
}

Micros Client::Backoff(const Options& options, int failures, std::mt19937_64& random) {
  // Doubling from the first wait, never past the longest; with jitter, a random part of it
  // (random_factor of the wait) taken off, so that a fleet restarted together does not come
  // back together.
  const double doubled = static_cast<double>(options.backoff_initial.count()) *
                         std::pow(2.0, std::max(0, failures - 1));
  double wait = std::min(doubled, static_cast<double>(options.backoff_max.count()));
  if (options.backoff_jitter && options.backoff_random_factor > 0) {
    wait -= wait * options.backoff_random_factor *
            std::uniform_real_distribution<double>(0.0, 1.0)(random);
  }
  return std::max(kMinWait, Micros{static_cast<int64_t>(wait)});
}

bool Client::Sleep(Micros delay) {
  std::unique_lock lock(mutex_);
  return !wake_.wait_for(lock, delay, [this] { return stopping_; });
}

void Client::Run() {
  std::mt19937_64 random{std::random_device{}()};
  int failures = 0;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) {
        return;
      }
    }
    failures = Stream() ? 1 : failures + 1;
    const Micros wait = Backoff(options_, failures, random);
    spdlog::info("xDS: opening the stream to {} again in {}", options_.server,
                 FormatDuration(wait));
    if (!Sleep(wait)) {
      return;
    }
  }
}

absl::Status Client::Take(const envoy::service::discovery::v3::DiscoveryResponse& response) {
  // A response of another type (an ADS server may multiplex) is refused, never read as an
  // empty set of rules, which would put none in force.
  if (response.type_url() != kRateLimitConfigType) {
    return absl::InvalidArgumentError(fmt::format("a response of type '{}', not {}",
                                                  response.type_url().substr(0, kMaxReason),
                                                  kRateLimitConfigType));
  }
  try {  // yaml-cpp reports by exceptions; none may end the client's thread.
    absl::StatusOr<std::vector<std::pair<std::string, std::string>>> files =
        RulesFiles(response.resources());
    return files.ok() ? apply_(*files, response.version_info()) : files.status();
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(fmt::format("the set cannot be read: {}", e.what()));
  }
}

bool Client::Stream() {
  grpc::ChannelArguments args;
  // A server whose host vanishes without a reset is found out by keep-alive pings, so that the
  // stream is opened again rather than waited on for ever. Every 5 minutes: grpc-go servers
  // (go-control-plane's) refuse pings more often than that by default.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5 * 60 * 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  if (options_.tls && !options_.tls_server_name.empty()) {
    args.SetSslTargetNameOverride(options_.tls_server_name);
  }
  if (options_.max_message_bytes > 0) {
    args.SetMaxReceiveMessageSize(options_.max_message_bytes);
  }
  const auto stub = discovery::AggregatedDiscoveryService::NewStub(
      grpc::CreateCustomChannel(options_.server, credentials_, args));
  grpc::ClientContext context;
  for (const auto& [name, value] : options_.headers) {
    context.AddMetadata(name, value);
  }
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {
      return false;
    }
    stream_ = &context;
  }
  auto stream = stub->StreamAggregatedResources(&context);

  // A new stream says the version it holds (none before the first), as go-control-plane's
  // client does, so that a server need not send that version again; its nonce is the stream's.
  discovery::DiscoveryRequest request;
  request.set_version_info(version_);
  request.set_type_url(kRateLimitConfigType);
  envoy::config::core::v3::Node& node = *request.mutable_node();
  node.set_id(options_.node_id);
  node.set_user_agent_name("sluiced");
  for (const auto& [key, value] : options_.node_metadata) {
    (*node.mutable_metadata()->mutable_fields())[key].set_string_value(value);
  }
  bool answered = false;
  if (stream->Write(request)) {
    spdlog::info("xDS: asking {} for the rate limit configurations of node '{}'", options_.server,
                 options_.node_id);
    discovery::DiscoveryResponse response;
    while (stream->Read(&response)) {
      answered = true;
      request.set_response_nonce(response.nonce());
      request.clear_error_detail();
      const absl::Status applied = Take(response);
      if (applied.ok()) {
        version_ = response.version_info();  // ACK.
        request.set_version_info(version_);
      } else {  // NACK: the version last taken stays in version_info.
        request.mutable_error_detail()->set_code(kInvalidArgument);
        // Bounded: the reason may quote what the server sent (a resource's name, its type).
        request.mutable_error_detail()->set_message(
            std::string(applied.message().substr(0, kMaxReason)));
      }
      if (!stream->Write(request)) {
        break;
      }
    }
  }
  stream->WritesDone();
  const grpc::Status status = stream->Finish();
  {
    std::lock_guard lock(mutex_);
    stream_ = nullptr;
    if (stopping_) {
      return answered;
    }
  }
  spdlog::error("xDS: the stream to {} ended: {} ({})", options_.server,
                status.error_message().empty() ? "closed by the server" : status.error_message(),
                static_cast<int>(status.error_code()));
  return answered;
}

}  // namespace sluice::server::xds
