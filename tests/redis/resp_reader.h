#pragma once

// RESP bytes read back as the Redis store's connections read Redis's answers (hiredis's
// redisReader), for the tests of what the store writes (commands) and reads (replies) without
// a server: a command is itself a RESP array of bulk strings, and a reply can be written by
// hand.

#include <memory>
#include <string_view>

#include "gtest/gtest.h"
#include <hiredis/hiredis.h>

#include "src/redis/resp.h"

namespace sluice::testing {

// The one reply that `bytes` hold. Null, and a test failure, when they are not exactly one
// whole reply: less, more, or not RESP.
inline internal::ReplyPtr ReadResp(std::string_view bytes) {
  const std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(redisReaderCreate(),
                                                                        &redisReaderFree);
  void* reply = nullptr;
  if (redisReaderFeed(reader.get(), bytes.data(), bytes.size()) != REDIS_OK ||
      redisReaderGetReply(reader.get(), &reply) != REDIS_OK) {
    ADD_FAILURE() << "not RESP: " << reader->errstr;
    return nullptr;
  }
  internal::ReplyPtr first(static_cast<redisReply*>(reply));
  if (first == nullptr) {
    ADD_FAILURE() << "less than one whole reply";
    return nullptr;
  }
  if (reader->pos != reader->len) {
    ADD_FAILURE() << "more than one reply: " << reader->len - reader->pos << " bytes left";
    return nullptr;
  }
  return first;
}

}  // namespace sluice::testing
