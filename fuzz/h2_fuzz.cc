// libFuzzer target: bytes a gRPC client might send to the h2 engine (GrpcH2Session), as one
// connection's reads. The first byte chooses how the rest is cut into reads; the client's
// preface is put before the rest unless the input starts with it (so that the fuzzer spends
// its time on frames). A service answers some calls at once and the others after the read,
// as a store on another thread would; time moves on between reads, past deadlines and the
// keep-alive. Whatever comes in, the session must neither crash nor leak, and what it says
// back must be taken whole.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/grpc/h2_session.h"

namespace {

using sluice::Micros;
using sluice::server::GrpcCode;
using sluice::server::GrpcH2Session;
using sluice::server::GrpcReply;
using sluice::server::GrpcUnaryService;
using sluice::server::H2Options;
using sluice::server::SteadyTime;

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Answers a call with an even-length request at once (its request back as the body), holds
// the others for after the read.
class Service final : public GrpcUnaryService {
 public:
  void Call(std::string_view path, std::string_view request, Done done) override {
    if (request.size() % 2 == 0) {
      std::move(done)(GrpcReply{.body = std::string(request)});
      return;
    }
    held_.push_back(std::move(done));
    (void)path;
  }
  void Release() {
    for (Done& done : held_) {
      std::move(done)(GrpcReply{GrpcCode::kUnavailable, "later \x01 \xff"});
    }
    held_.clear();
  }

 private:
  std::vector<Done> held_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) {
    return 0;
  }
  const size_t chunk = 1 + data[0] % 64 * 37;  // 1 to 2332 bytes a read.
  std::string input(reinterpret_cast<const char*>(data + 1), size - 1);
  if (!input.starts_with(kPreface)) {
    input.insert(0, kPreface);
  }
  H2Options options{.max_concurrent_streams = 16,
                    .max_message_bytes = 4096,
                    .max_header_bytes = 2048,
                    .ping_interval = Micros{2'000'000}};
  Service service;
  SteadyTime now{};
  std::vector<std::pair<int32_t, GrpcReply>> later;
  GrpcH2Session* self = nullptr;
  GrpcH2Session session(
      service, options,
      [&self](int32_t id) -> GrpcUnaryService::Done {
        return [&self, id](GrpcReply reply) { self->Answer(id, std::move(reply)); };
      },
      now);
  self = &session;
  if (!session.ok()) {
    return 0;
  }
  std::string out;
  for (size_t at = 0; at < input.size(); at += chunk) {
    const std::string_view read = std::string_view(input).substr(at, chunk);
    const bool alive =
        session.Receive({reinterpret_cast<const uint8_t*>(read.data()), read.size()}, now);
    service.Release();
    out.clear();
    if (!session.Send(out, size_t{1} << 20) || !alive) {
      return 0;
    }
    now += std::chrono::milliseconds(700);
    if (!session.Tick(now)) {
      return 0;
    }
    (void)session.NextTick();
  }
  session.Drain();
  out.clear();
  session.Send(out, size_t{1} << 20);
  (void)session.Finished();
  return 0;
}
