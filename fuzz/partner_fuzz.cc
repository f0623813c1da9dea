// A partner's answer (server/http/partner_headers.h): the input is a header dump, one
// "Name: value" per line, whose first line is the status. Whatever the values, reading must
// not crash, overflow or throw, and what it reads stays within its bounds: times within
// kMaxPartnerTime, counts within Limit::kMaxCount, at most 16 notes.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/partner_headers.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice;
  using namespace sluice::server;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<PartnerHeader> headers;
  int status = 0;
  size_t start = 0;
  for (size_t line = 0; start <= text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      end = text.size();
    }
    const std::string_view l = text.substr(start, end - start);
    if (line == 0) {
      for (char c : l.substr(0, 3)) {
        status = c >= '0' && c <= '9' ? status * 10 + (c - '0') : status;
      }
    } else if (const size_t colon = l.find(':'); colon != std::string_view::npos) {
      headers.push_back({std::string(l.substr(0, colon)), std::string(l.substr(colon + 1))});
    }
    start = end + 1;
  }
  const Timestamp now{std::chrono::seconds(1'795'000'000)};
  const PartnerAnswer answer = ReadPartnerAnswer(status, headers, now);
  for (const std::optional<Micros>& t : {answer.retry_after, answer.reset, answer.window}) {
    if (t && (*t < Micros{0} || *t > kMaxPartnerTime)) {
      std::abort();
    }
  }
  for (const std::optional<int64_t>& n : {answer.remaining, answer.quota}) {
    if (n && (*n < 0 || *n > Limit::kMaxCount)) {
      std::abort();
    }
  }
  if (answer.notes.size() > 16) {
    std::abort();
  }
  return 0;
}
