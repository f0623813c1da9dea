#include "tools/svg_notes.h"

#include "fmt/format.h"

#include "sluice/duration.h"

namespace sluice::tools {

std::string LaneNote(const Limit& limit, int64_t most) {
  const int64_t n = limit.limit();
  const int64_t b = limit.burst();
  const std::string p = FormatDuration(limit.period());
  // The most the algorithm lets through in one trailing period, where the line can reach.
  std::string note;
  switch (limit.algorithm()) {
    case Algorithm::kFixedWindow:
      note = fmt::format(
          "windows aligned to each {0}, up to N = {1} in each: a {0} across an edge can pass "
          "up to 2N = {2}",
          p, n, 2 * n);
      break;
    case Algorithm::kSlidingLog:
      note = fmt::format("exact: a log of admissions; never more than N = {} in any {}", n, p);
      break;
    case Algorithm::kSlidingWindow:
      note = fmt::format(
          "counts the previous window weighted by its overlap, as if its traffic were even: "
          "uneven traffic can pass a little more than N = {} in a {}",
          n, p);
      break;
    case Algorithm::kSlidingBuckets:
      note = fmt::format(
          "{} buckets of {}: at most N = {} in any {} whole buckets; a {} that cuts a bucket "
          "can see more",
          limit.buckets(), FormatDuration(Micros(limit.period().count() / limit.buckets())), n,
          limit.buckets(), p);
      break;
    case Algorithm::kTokenBucket:
    case Algorithm::kGcra:
      note = fmt::format(
          "{}burst B = {}: a full bucket passes {} at once and refills N = {} per {}, so one {} "
          "can pass up to B + N = {}",
          limit.algorithm() == Algorithm::kGcra ? "as token_bucket: " : "", b, b, n, p, p, b + n);
      break;
    case Algorithm::kLeakyBucket:
      note = fmt::format(
          "burst B = {}: queues up to {} at once but delays each to act at N = {} per {}; the "
          "line counts them when they act",
          b, b, n, p);
      break;
  }
  if (most > n) {
    note += fmt::format("; here {}", most);
  }
  return note;
}

}  // namespace sluice::tools
