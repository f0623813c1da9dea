#pragma once

// RESP, Redis's protocol, as far as RedisStore writes it by hand: one argument (a bulk
// string) and a command made of them. Replies are parsed by hiredis's redisReader
// (connection.cc) into redisReply trees, which ReplyPtr owns.
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

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using ReplyPtr = std::unique_ptr<redisReply, ReplyDeleter>;

}  // namespace sluice::internal
