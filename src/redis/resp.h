#pragma once

// RESP, Redis's protocol, as far as RedisStore writes it by hand: one argument (a bulk
// string) and a command made of them. Replies are parsed by hiredis's redisReader
// (CreateReader, for connection.cc and sentinel.cc) into redisReply trees, which ReplyPtr owns.
//
// Pure functions: thread-safe.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include <hiredis/hiredis.h>

namespace sluice::internal {

// RESP, the protocol's framing of one argument: "$<length>\r\n<bytes>\r\n". Written by hand
// rather than with hiredis's redisFormatCommandArgv, which allocates a whole command per call:
// a batch is assembled from the pieces of many calls.
inline void AppendBulk(std::string& out, std::string_view arg) {
  out += '$';
  out += fmt::format_int(arg.size()).str();
  out += "\r\n";
  out += arg;
  out += "\r\n";
}
inline void AppendBulk(std::string& out, int64_t n) { AppendBulk(out, fmt::format_int(n).str()); }

// A whole command, "*<count>\r\n" and its arguments: the store's own (AUTH, SCRIPT LOAD, ...).
inline std::string Command(std::initializer_list<std::string_view> args) {
  std::string out = fmt::format("*{}\r\n", args.size());
  for (std::string_view a : args) {
    AppendBulk(out, a);
  }
  return out;
}

// The longest array a reply may have. hiredis allocates a pointer per element an array
// announces before any element arrives, so "*2147483647\r\n" alone would take 16 GiB. The
// script's reply to a batch is one flat array (per call 1 + 5 or 7 per limit, so up to batch
// x limits x 7: far below this bound even for Envoy requests of thousands of descriptors);
// nested arrays (CLUSTER SLOTS' ranges and nodes, ROLE's replicas) are short.
inline constexpr int kMaxReplyElements = 1 << 24;  // 128 MiB of pointers at most.
inline constexpr int kMaxNestedReplyElements = 1 << 16;

// A reader of replies whose arrays are bounded as above: a longer one fails the reader as
// hiredis fails on memory ("Out of memory"), so ReadReplies returns false. Free it with
// redisReaderFree.
inline redisReader* CreateReader() {
  static redisReplyObjectFunctions bounded = [] {
    redisReader* plain = redisReaderCreate();
    static const redisReplyObjectFunctions hiredis = *plain->fn;
    redisReaderFree(plain);
    redisReplyObjectFunctions f = hiredis;
    // `auto`: hiredis 0.14 counts elements in an int, 1.x in a size_t.
    f.createArray = [](const redisReadTask* task, auto elements) -> void* {
      const int most = task->parent == nullptr ? kMaxReplyElements : kMaxNestedReplyElements;
      if (elements > static_cast<decltype(elements)>(most)) {
        return nullptr;
      }
      return hiredis.createArray(task, elements);
    };
    return f;
  }();
  return redisReaderCreateWithFunctions(&bounded);
}

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

// Feeds `n` bytes read from Redis to `reader`, and hands each whole reply they complete to
// `on_reply` while `more()` holds (a reply may close the connection it came on). False when
// the bytes are not RESP.
template <typename OnReply, typename More>
bool ReadReplies(redisReader& reader, const char* data, size_t n, OnReply on_reply, More more) {
  if (redisReaderFeed(&reader, data, n) != REDIS_OK) {
    return false;
  }
  while (more()) {
    void* reply = nullptr;
    if (redisReaderGetReply(&reader, &reply) != REDIS_OK) {
      return false;
    }
    if (reply == nullptr) {
      break;
    }
    on_reply(ReplyPtr(static_cast<redisReply*>(reply)));
  }
  return true;
}

}  // namespace sluice::internal
