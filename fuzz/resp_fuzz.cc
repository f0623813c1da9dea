// Redis's replies as the Redis store reads them: bytes fed to the store's hiredis reader
// (CreateReader) through ReadReplies (src/redis/resp.h), in two pieces as a socket may deliver
// them, and each whole reply read as each of the store's questions reads it: the script's reply
// to a batch of calls (ReadReply, src/redis/call.h), CLUSTER SLOTS, a MOVED/ASK redirection,
// ROLE, a sentinel's master address and +switch-master. The first byte shapes the batch: how
// many calls, each with how many keys, in which mode.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "src/redis/call.h"
#include "src/redis/cluster.h"
#include "src/redis/resp.h"
#include "src/redis/sentinel.h"

namespace sluice::internal {
namespace {

// A batch as the store sends it: every call has at least one key (a request has a limit).
struct Batch {
  std::vector<CallPtr> calls;
  std::vector<std::vector<Decision>> each;
  std::vector<std::vector<Charge>> receipts;

  explicit Batch(uint8_t shape) {
    const int n = 1 + (shape & 3);
    const size_t keys = 1 + ((shape >> 2) & 3);
    each.resize(n);
    receipts.resize(n);
    for (int i = 0; i < n; ++i) {
      auto call = std::make_unique<Call>();
      call->mode = static_cast<Call::Mode>(((shape >> 4) + i) & 3);
      call->cost = 1;
      call->keys.assign(keys, "k");
      each[i].resize(keys);
      receipts[i].resize(keys);
      call->each = each[i];
      call->receipts = receipts[i];
      calls.push_back(std::move(call));
    }
  }
};

void ReadEveryWay(const redisReply& reply, uint8_t shape) {
  Batch batch(shape);
  size_t at = 0;
  for (CallPtr& c : batch.calls) {
    (void)ReadReply(reply, at, *c);
  }
  const RedisEndpoint asked{.host = "127.0.0.1", .port = 6379};
  (void)ReadClusterSlots(reply, asked);
  if (reply.str != nullptr) {
    const std::string_view text(reply.str, reply.len);
    (void)Redirection(text);
    (void)ReadSwitchMaster(text, "mymaster");
  }
  (void)IsMasterRole(reply);
  (void)ReadMasterAddress(reply);
}

}  // namespace
}  // namespace sluice::internal

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::internal;
  if (size < 2) {
    return 0;
  }
  const uint8_t shape = data[0];
  const size_t split = std::min<size_t>(data[1], size - 2);
  const char* bytes = reinterpret_cast<const char*>(data + 2);
  const std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(CreateReader(),
                                                                        &redisReaderFree);
  auto each = [&](ReplyPtr reply) { ReadEveryWay(*reply, shape); };
  auto more = [] { return true; };
  if (ReadReplies(*reader, bytes, split, each, more)) {
    (void)ReadReplies(*reader, bytes + split, size - 2 - split, each, more);
  }
  return 0;
}
