// Resident memory per key: the growth of this process's resident set while a MemoryStore
// learns `--keys` keys (default 1,000,000) of 16 to 24 characters, divided by the keys, for
// one algorithm or all. Usage: sluice_memory_bench [--keys N] [--compact-keys] [ALGORITHM...]
// (--compact-keys: MemoryStoreOptions::compact_keys, fingerprints kept instead of keys).
// Each algorithm runs in a fresh child process, so that memory freed by one does not hide the
// growth of the next.

#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "sluice/limiter.h"
#include "sluice/memory_store.h"

namespace sluice {
namespace {

long ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0;
  long resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// "client-0000000042" style keys: 16 characters up to 10^9, then longer; 24 at most.
int MakeKey(int64_t n, char* buf) {
  std::memcpy(buf, "client-", 7);
  char digits[20];
  char* const end = std::to_chars(digits, digits + sizeof(digits), n * 7919 + 13).ptr;
  const int len = static_cast<int>(end - digits);
  const int pad = len < 9 ? 9 - len : 0;
  std::memset(buf + 7, '0', pad);
  std::memcpy(buf + 7 + pad, digits, len);
  return 7 + pad + len;
}

void Measure(Algorithm algorithm, int64_t keys, bool compact_keys) {
  const Limit limit = *Limit::Create(
      {.algorithm = algorithm, .limit = 100, .period = std::chrono::hours(1), .buckets = 60});
  MemoryStore store({.compact_keys = compact_keys});
  const Timestamp now = SystemClock().Now();
  char buf[32];
  // Warm the store's fixed parts (the table, its shards) before the baseline is read.
  (void)store.Decide(limit, "warm-up", 1, now);
  const long before = ResidentBytes();
  for (int64_t n = 0; n < keys; ++n) {
    const int len = MakeKey(n, buf);
    (void)store.Decide(limit, std::string_view(buf, len), 1, now);
  }
  const long after = ResidentBytes();
  std::printf("%-16s %9lld keys  %7.1f bytes/key  (resident +%.1f MiB; store holds %zu keys)\n",
              std::string(AlgorithmName(algorithm)).c_str(), static_cast<long long>(keys),
              static_cast<double>(after - before) / static_cast<double>(keys),
              static_cast<double>(after - before) / (1 << 20), store.KeyCount());
  std::fflush(stdout);
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  int64_t keys = 1'000'000;
  bool compact_keys = false;
  std::vector<sluice::Algorithm> algorithms;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--keys") == 0 && i + 1 < argc) {
      keys = std::atoll(argv[++i]);
    } else if (std::strcmp(argv[i], "--compact-keys") == 0) {
      compact_keys = true;
    } else if (absl::StatusOr<sluice::Algorithm> a = sluice::ParseAlgorithm(argv[i]); a.ok()) {
      algorithms.push_back(*a);
    } else {
      std::fprintf(stderr, "usage: %s [--keys N] [--compact-keys] [ALGORITHM...]\n", argv[0]);
      return 2;
    }
  }
  if (algorithms.empty()) {
    for (int a = 0; a <= static_cast<int>(sluice::Algorithm::kLeakyBucket); ++a) {
      algorithms.push_back(static_cast<sluice::Algorithm>(a));
    }
  }
  for (sluice::Algorithm algorithm : algorithms) {
    const pid_t child = fork();
    if (child == 0) {
      sluice::Measure(algorithm, keys, compact_keys);
      std::_Exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
  }
  return 0;
}
