#include "src/redis/keys.h"

#include "fmt/format.h"

namespace sluice::internal {
namespace {

char AlgorithmLetter(Algorithm a) {
  switch (a) {
    case Algorithm::kFixedWindow:
      return 'f';
    case Algorithm::kSlidingLog:
      return 'l';
    case Algorithm::kSlidingWindow:
      return 'w';
    case Algorithm::kSlidingBuckets:
      return 'k';
    case Algorithm::kTokenBucket:
      return 't';
    case Algorithm::kGcra:
      return 'g';
    case Algorithm::kLeakyBucket:
      return 'q';
  }
  return '?';
}

}  // namespace

std::string RedisKey(std::string_view prefix, const Limit& limit, std::string_view key) {
  std::string out(prefix);
  out += AlgorithmLetter(limit.algorithm());
  out += fmt::format("{}/{}", limit.limit(), limit.period().count());
  if (UsesBurst(limit.algorithm())) {
    out += fmt::format("b{}", limit.burst());
  }
  if (limit.algorithm() == Algorithm::kSlidingBuckets) {
    out += fmt::format("k{}", limit.buckets());
  }
  if (limit.calendar()) {  // "c2Europe/Berlin": a month there (a zone name has no ':').
    out += fmt::format("c{}{}", static_cast<int>(*limit.calendar()), limit.time_zone().name());
  }
  out += ':';
  AppendTaggedKey(out, key);
  return out;
}

std::string CarriedKey(std::string_view prefix, const Limit& limit, std::string_view key) {
  return RedisKey(fmt::format("{}carried:", prefix), limit, key);
}

std::string LeaseKey(std::string_view prefix, std::string_view key) {
  std::string out(prefix);
  out += "lease:";
  AppendTaggedKey(out, key);
  return out;
}

void AppendTaggedKey(std::string& out, std::string_view key) {
  if (HashTag(key)) {
    out += '=';  // The caller chose the slot with a tag of its own.
    out += key;
  } else if (key.find('}') == std::string_view::npos) {
    out += '{';
    out += key;
    out += '}';
  } else {
    // No tag and a '}' that would end one early: tag with a digest of the key instead.
    out += fmt::format("#{{{:016x}}}", StableHash(key));
    out += key;
  }
}

std::optional<std::string_view> HashTag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) {
    return std::nullopt;
  }
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) {
    return std::nullopt;
  }
  return key.substr(open + 1, close - open - 1);
}

uint64_t StableHash(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325;
  for (char c : s) {
    h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3;
  }
  return h;
}

uint16_t Crc16(std::string_view s) {
  uint16_t crc = 0;
  for (char c : s) {
    crc ^= static_cast<uint16_t>(static_cast<unsigned char>(c) << 8);
    for (int i = 0; i < 8; ++i) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                                : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc;
}

int HashSlot(std::string_view key) { return Crc16(HashTag(key).value_or(key)) % kSlotCount; }

}  // namespace sluice::internal
