#pragma once

// Rules: the limits sluiced enforces, loaded from YAML files in envoyproxy/ratelimit's format
// (domain, descriptors, key, value, rate_limit, replaces, shadow_mode, ...) plus sluice's
// extensions (algorithm, period, burst, buckets, several limits per descriptor, throttling
// modes, elastic pools, IP grouping, the descriptors of GET /v1/auth). docs/server.md
// describes the format; this header is its model in memory and the matching of requests.
//
// A RuleSet is immutable once loaded: the server swaps in a new one on reload, and requests in
// flight keep the one they started with. Thread-safe for concurrent readers.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

#include "sluice/limit.h"
#include "sluice/store.h"

namespace sluice::server {

// Envoy's RateLimitUnit, with the WEEK that envoyproxy/ratelimit adds. MONTH is 30 days and
// YEAR 365, as theirs.
enum class Unit : uint8_t {
  kUnknown = 0,
  kSecond = 1,
  kMinute = 2,
  kHour = 3,
  kDay = 4,
  kMonth = 5,
  kYear = 6,
  kWeek = 7,
};
std::string_view UnitName(Unit unit);  // "SECOND", ...
// Case-insensitive, as envoyproxy/ratelimit reads it; nullopt for anything else.
std::optional<Unit> ParseUnit(std::string_view name);
Micros UnitPeriod(Unit unit);  // REQUIRES: unit != kUnknown.
// The unit whose period is `period`, or kUnknown.
Unit UnitOfPeriod(Micros period);

// How a rule's limits act on a request over them.
enum class Mode : uint8_t {
  kHard,     // Deny.
  kSoft,     // Admit up to the limit plus soft_percent, and mark what is past the limit.
  kShadow,   // Count and report, never deny.
  kElastic,  // When over, borrow from the rule's pool (a shared spare-capacity limit).
};
std::string_view ModeName(Mode mode);

class TopKeys;  // server/stats/top_keys.h

// Counters of one rule limit, kept across reloads (by name) for /metrics and statsd.
struct RuleCounters {
  // In requests.
  std::atomic<uint64_t> checks{0};
  std::atomic<uint64_t> admitted{0};
  std::atomic<uint64_t> denied{0};
  std::atomic<uint64_t> near_limit{0};     // Admitted past the near-limit ratio of the limit.
  std::atomic<uint64_t> shadow_denied{0};  // Would have been denied, admitted by shadow mode.
  std::atomic<uint64_t> over_soft{0};      // Admitted past the limit by soft mode.
  std::atomic<uint64_t> borrowed{0};       // Admitted over the limit by an elastic pool.
  std::atomic<uint64_t> blocked{0};        // Denied by a block running on the key.
  std::atomic<uint64_t> paused{0};         // Denied by a pause its partner asked for.
  // Partners' answers (POST /v1/feedback) that started or lengthened a pause, and that
  // brought the remaining down to theirs.
  std::atomic<uint64_t> partner_pauses{0};
  std::atomic<uint64_t> partner_lowered{0};
  std::atomic<uint64_t> partner_cuts{0};  // Adaptive rates cut by a 429.
  std::atomic<uint64_t> paced{0};         // Denied by an adaptive rate below the limit.
  // In hits (a request's cost, Envoy's hits_addend), as envoyproxy/ratelimit counts its stats
  // (src/limiter/base_limiter.go): every hit in total_hits; a request over the limit counts
  // the hits past it in over_limit_hits (and again in shadow_mode_hits in shadow mode) and,
  // when it crossed the limit, those between the near-limit threshold and the limit in
  // near_limit_hits; a request within it counts its hits in within_limit_hits and those past
  // the threshold in near_limit_hits. Unlimited rules and concurrency limits count none.
  std::atomic<uint64_t> total_hits{0};
  std::atomic<uint64_t> over_limit_hits{0};
  std::atomic<uint64_t> near_limit_hits{0};
  std::atomic<uint64_t> within_limit_hits{0};
  std::atomic<uint64_t> shadow_mode_hits{0};
  // The near-limit ratio of the registry that made these counters (never null then).
  const std::atomic<float>* near_limit_ratio = nullptr;
  // Its top offenders (server/stats/top_keys.h), made at its first decision once they are on;
  // owned by the TopOffenders that made it.
  std::atomic<TopKeys*> top{nullptr};
};

// `feedback: {adaptive: {...}}`: the limit's rate itself follows the partner's 429s, fleet-wide
// (server/service/feedback.h, docs/algorithms.md "Adaptive rate"): cut to `cut` of what it was
// on a 429 (at most once per `cooldown`), then raised back linearly, from `floor` to the
// limit in `recover`, never above the limit.
struct AdaptivePolicy {
  int64_t floor = 1;  // In the limit's units per its period; below its requests_per_unit.
  double cut = 0.7;   // 0.05 to 0.95.
  Micros recover = std::chrono::minutes(1);
  Micros cooldown = std::chrono::seconds(1);
  friend bool operator==(const AdaptivePolicy&, const AdaptivePolicy&) = default;
};

// A limit's `feedback`: how what the partner answered (its 429s, Retry-After and RateLimit
// headers) acts on it, fleet-wide (server/service/feedback.h).
struct FeedbackPolicy {
  // A partner's time to wait (Retry-After, or a reset with nothing remaining) is obeyed for at
  // most this long: a hostile or broken partner cannot stop the fleet for years.
  Micros max_pause = std::chrono::hours(1);
  // How long a 429 that names no time pauses the limit (0: such a 429 pauses nothing).
  Micros pause = std::chrono::seconds(1);
  std::optional<AdaptivePolicy> adaptive;
  friend bool operator==(const FeedbackPolicy&, const FeedbackPolicy&) = default;
};

// The bounds of FeedbackPolicy's durations: max_pause a millisecond to a day; pause 0 to
// max_pause.
inline constexpr Micros kMinMaxPause = std::chrono::milliseconds(1);
inline constexpr Micros kMaxMaxPause = std::chrono::hours(24);

// The limit a pause is kept under (server/service/feedback.h): a gcra limit of 1 per
// millisecond with a burst of 1, whose backlog is the time the pause has left.
const Limit& PauseLimit();

// One limit of a rule, ready for the store.
struct RuleLimit {
  std::string name;    // rate_limit.name, or the descriptor path ("api.user", "api.user_alice").
  bool named = false;  // rate_limit.name was given: Envoy's responses carry it (else no name).
  // What the rule says: N per P. The limit the store enforces is `limit`, which equals it
  // except in soft mode, where it is enlarged by soft_percent.
  int64_t nominal = 0;
  std::optional<Limit> limit;  // Empty when requests_per_unit is 0: every request is denied.
  // For a fixed window (or requests_per_unit 0): the counter envoyproxy/ratelimit keeps, a
  // fixed window of the same period with room for any count (EnvoyCounter), so that the Envoy
  // API can count every hit, over the limit or not, and compare the count with `nominal`.
  std::optional<Limit> counter;
  // Envoy's view of the limit, for its responses: the unit the rule was written with, or
  // kUnknown when it was written with `period`.
  Unit unit = Unit::kUnknown;
  // Soft mode: the stored capacity (burst, or limit) minus the nominal one; 0 otherwise.
  int64_t soft_extra = 0;
  bool unlimited = false;             // Envoy's `unlimited: true`: never counted, never denied.
  std::vector<std::string> replaces;  // Names of limits this one replaces when both match.
  // `share: {max, ttl}`: the limit may be leased (SharePolicy, with --redis-shares).
  std::optional<SharePolicy> share;
  // `max_debt`: how far past the limit a settle may charge a key (sluice/settle.h); empty for
  // the default, one limit's worth (`nominal`).
  std::optional<int64_t> max_debt;
  // `block: D`: once a request is denied by this limit, its key is denied for D
  // (server/service/blocks.h); the limit that keeps such blocks, empty without one.
  std::optional<Limit> block;
  // `feedback: {...}`: the partner this limit paces calls to may slow it down (POST
  // /v1/feedback, server/service/feedback.h); empty: feedback on it is refused.
  std::optional<FeedbackPolicy> feedback;
  // With feedback's `adaptive`: the limit that paces the key below its rate (a gcra in units of
  // a microsecond, charged per request what the rate in force allows it: feedback.h's
  // PacingCost), and the one that claims a cut, 1 per cooldown.
  std::optional<Limit> pacing;
  std::optional<Limit> cut_claim;
  RuleCounters* counters = nullptr;  // Owned by a CounterRegistry; never null once loaded.
  // The figures this limit had under earlier rules, newest first, when a reload changed them
  // (docs/server.md, "Changing a limit"): a key's state under them carries to `limit`
  // (LimitedKey::before). A limit is the same limit across reloads when its rule's path and
  // its name are the same; a renamed one, or another rule's, starts afresh.
  std::vector<Limit> before;
};

// The most earlier figures a limit remembers (RuleLimit::before): a key untouched through more
// changes than this starts afresh.
inline constexpr size_t kMaxBefore = 4;

// The counter of a fixed window of `period` (or `calendar`'s windows) in envoyproxy/ratelimit's
// manner: Limit::kMaxCount hits per period, so that every hit is counted. Every limit of one period
// shares it, as their key is the descriptor and the window alone: a limit override shares the
// rule's count. REQUIRES: a period Limit::Create accepts.
Limit EnvoyCounter(Micros period, std::optional<Calendar> calendar = std::nullopt);

// The shortest and longest `block`: a millisecond, and the longest period a limit can have.
inline constexpr Micros kMinBlock = std::chrono::milliseconds(1);
inline constexpr Micros kMaxBlock = Limit::kMaxPeriod;

// The limit that keeps a rule's blocks of `duration` (server/service/blocks.h): a gcra limit
// of 1 per `duration` with a burst of 1. REQUIRES: kMinBlock <= duration <= kMaxBlock.
Limit BlockLimit(Micros duration);

// A pool of spare capacity that elastic rules borrow from.
struct Pool {
  std::string name;
  RuleLimit limit;
};

// A descriptor's `concurrency: N`: at most N leases held at once on its key (per value of
// the request), each given back by POST /v1/release or expiring after lease_ttl.
struct ConcurrencyLimit {
  static constexpr Micros kDefaultLeaseTtl = std::chrono::minutes(1);
  std::string name;  // The rule's path and ":concurrency" ("jobs.job_mailer:concurrency").
  int64_t capacity = 0;
  Micros lease_ttl = kDefaultLeaseTtl;
  RuleCounters* counters = nullptr;  // Owned by a CounterRegistry; never null once loaded.
};

// A descriptor node that carries limits.
struct Rule {
  std::string path;  // "api.user_alice.path": domain, then key or key_value per level.
  // Decided all or nothing; one (unlimited) when unlimited; none when the rule has only a
  // concurrency limit.
  std::vector<RuleLimit> limits;
  std::optional<ConcurrencyLimit> concurrency;  // Always hard: modes apply to `limits`.
  bool unlimited = false;
  Mode mode = Mode::kHard;
  // envoyproxy/ratelimit's quota_mode: over its limit, the request is over only when every
  // quota rule it matched is (DescriptorResult::quota_mode).
  bool quota_mode = false;
  // envoyproxy/ratelimit's `metadata`: a JSON object, returned to Envoy as dynamic metadata
  // when the descriptor is within its limit. Empty when the rule has none (or an empty
  // mapping), as theirs. Typed as theirs types it (yaml.v2, then google.protobuf.Struct):
  // plain numbers are numbers, true/false (and YAML 1.1's yes/no/on/off) booleans, null null,
  // quoted scalars strings, mappings and lists kept.
  std::string metadata_json;
  int64_t soft_percent = 0;
  const Pool* pool = nullptr;  // Elastic mode only.
  // envoyproxy/ratelimit's detailed_metric (or value_to_metric): counted under the values of
  // the request ("api.user_alice") rather than the rule's path ("api.user").
  bool detailed_metric = false;
};

// One entry of a request descriptor.
struct Entry {
  std::string key;
  std::string value;
};

struct DescriptorNode;

// The descriptors of one level of a domain's tree, indexed for matching.
struct DescriptorLevel {
  struct ByKey {
    // By value as written: a request's value equal to a wildcard's text matches it here
    // first, as theirs.
    std::map<std::string, const DescriptorNode*, std::less<>> exact;
    std::vector<const DescriptorNode*> wildcards;  // In file order.
    const DescriptorNode* any = nullptr;           // The node with this key and no value.
  };
  std::vector<std::unique_ptr<DescriptorNode>> nodes;  // In file order.
  std::map<std::string, ByKey, std::less<>> by_key;
};

struct DescriptorNode {
  std::string key;
  // The value as written, '*' included; nullopt (`value` absent, null or "") matches any value
  // of `key`.
  std::optional<std::string> value;
  // `value` has a '*': each '*' matches any run of characters, empty included (their
  // wildcardMatch). `segments` is `value` split at every '*' (one more than the '*'s).
  bool wildcard = false;
  std::vector<std::string> segments;
  // The value as written, '*' included (*value; empty when there is none): with
  // share_threshold, the part of the counter's key that every matching value shares.
  std::string pattern;
  // envoyproxy/ratelimit's share_threshold: every value this wildcard matches shares one
  // counter (the key built from `pattern`) rather than one counter per value. Only on a
  // wildcard node: the loader refuses it elsewhere.
  bool share_threshold = false;
  std::optional<Rule> rule;  // Present when this node has a rate_limit (or limits).
  DescriptorLevel children;
};

// Whether `value` matches the segments of a wildcard (DescriptorNode::segments): it begins
// with the first, ends with the last, and holds the others in order between them.
bool WildcardMatches(const std::vector<std::string>& segments, std::string_view value);

// Where the descriptors of GET /v1/auth come from: one entry per (key, header).
struct AuthEntry {
  std::string key;
  std::string header;  // Lower case. ":remote_addr" for the peer address.
};

struct Domain {
  std::string name;
  std::string file;
  DescriptorLevel descriptors;
  std::vector<std::unique_ptr<Pool>> pools;
  // Descriptor keys whose values are client IP addresses; IPv6 values are grouped by
  // ipv6_prefix bits (default /64), IPv4 values used as they are.
  std::vector<std::string> ip_keys;
  int ipv6_prefix = 64;
  std::vector<std::vector<AuthEntry>> auth;  // GET /v1/auth descriptors; empty if none.
  // Some descriptor has share_threshold: matching must say which nodes a request went through.
  bool share_threshold = false;
};

// Keeps RuleCounters by name for the process's lifetime, so that a reload keeps the counts of
// the rules it keeps. Thread-safe.
class CounterRegistry {
 public:
  CounterRegistry();
  ~CounterRegistry();
  CounterRegistry(const CounterRegistry&) = delete;
  CounterRegistry& operator=(const CounterRegistry&) = delete;

  // The counters named `name`, created on first use. Stable for the registry's lifetime.
  RuleCounters* Get(const std::string& name);
  // As Get, but creates no more than kMaxDetailed counters this way (per value of a request,
  // for detailed_metric, where the values are the callers'): nullptr once they are used up.
  static constexpr size_t kMaxDetailed = 10'000;
  RuleCounters* GetDetailed(const std::string& name);
  // Every counter ever created, in name order.
  std::vector<std::pair<std::string, const RuleCounters*>> All() const;

  // envoyproxy/ratelimit's NEAR_LIMIT_RATIO: a limit of N is near once more than
  // floor(N * ratio) of it is used. For every counter of this registry, made before or after.
  // REQUIRES: 0 <= ratio <= 1.
  static constexpr float kDefaultNearLimitRatio = 0.8F;
  void set_near_limit_ratio(float ratio);
  float near_limit_ratio() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The store's verdict on a limit (Store::CheckLimit), asked for every limit of a rule file.
using LimitChecker = std::function<absl::Status(const Limit&)>;

// Bounds on what the rules files of one load may expand to (server/rules/scan.h), so that a
// hostile file (an alias bomb: a few kilobytes that expand to billions of nodes) is refused
// before it costs the memory or time, with an error naming the limit and where it was hit.
// The defaults are about five times what the largest real configurations need
// (envoyproxy/ratelimit files of 100,000 per-value rules: 12.5 MB, 1.1 million nodes). The
// node limit also bounds yaml-cpp's tree while a file loads (about 600 bytes a node: 3 GB).
struct RuleFileLimits {
  uint64_t max_file_bytes = uint64_t{64} << 20;  // The files' bytes, as read.
  int max_depth = 64;                            // Nesting of YAML mappings and lists.
  // Of the YAML: every node (key, value, mapping, list) and the bytes of every scalar, each
  // alias counted as the whole of what it names.
  uint64_t max_nodes = 5'000'000;
  uint64_t max_scalar_bytes = uint64_t{256} << 20;
  uint64_t max_descriptors = 1'000'000;
  uint64_t max_limits = 1'000'000;  // Rule limits: a rate_limit, an entry of `limits`, a pool.
};

class RuleSet;

// The figures each limit of a RuleSet is known by (lineage.cc): its identity (the rule's path
// and the limit's name; a pool's domain and name) to the figures in force, then its earlier
// ones (RuleLimit::before), newest first. What a reload, or a restart with a snapshot, carries
// from the rules before to those after.
using LimitHistory = absl::flat_hash_map<std::string, std::vector<Limit>>;
LimitHistory HistoryOf(const RuleSet& rules);
// One line per limit: the identity C-escaped, then each set of figures as
// "<tab>algorithm:N:P:B:K"; ParseHistory reads it back, refusing (InvalidArgument, naming the
// line) anything else.
std::string FormatHistory(const LimitHistory& history);
absl::StatusOr<LimitHistory> ParseHistory(std::string_view text);

// How a set of rules files is loaded.
struct RuleLoadOptions {
  // envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: a file naming a domain that an earlier file
  // defined adds its descriptors (and pools and auth descriptors) to that domain, rather than
  // being an error. A descriptor whose key and value are already at the top level is still
  // an error, as theirs.
  bool merge_domains = false;
  // envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES: in a directory, files and folders whose
  // names start with '.' are not read.
  bool skip_dotfiles = false;
  RuleFileLimits limits;
  // Not empty: the store keeps no leases (Memcached), so a `concurrency:` rule is refused at
  // load, naming the rule and this reason, rather than failing every request it matches.
  std::string no_leases;
  // The limits in force before this load (HistoryOf the rules a reload replaces, or what a
  // snapshot kept of them), if any: each limit they hold under the same identity with other
  // figures takes them as its RuleLimit::before.
  std::shared_ptr<const LimitHistory> previous;
};

class RuleSet {
 public:
  // No rules: every rules-mode request matches nothing.
  RuleSet() = default;

  // Loads `path`: a YAML file, or a directory whose *.yaml and *.yml files, its folders' too,
  // are each loaded in path order (one domain per file, as envoyproxy/ratelimit, unless
  // options.merge_domains). Errors: InvalidArgument "FILE:LINE:COLUMN: what is wrong", or
  // "FILE: ..." when the file cannot be read.
  static absl::StatusOr<std::shared_ptr<const RuleSet>> Load(const std::string& path,
                                                             CounterRegistry& counters,
                                                             const LimitChecker& check_limit,
                                                             const RuleLoadOptions& options = {});
  // The files Load reads for `path`: `path` itself, or a directory's *.yaml and *.yml files,
  // and those of its folders to kMaxFolderDepth (not through a symlink to a folder within it),
  // in path order; without `skip_dotfiles`' names. A folder nested deeper is an error.
  static constexpr int kMaxFolderDepth = 16;
  static absl::StatusOr<std::vector<std::string>> Files(const std::string& path,
                                                        bool skip_dotfiles = false);
  // As Load, from (file name, text) pairs, in their order.
  static absl::StatusOr<std::shared_ptr<const RuleSet>> Parse(
      const std::vector<std::pair<std::string, std::string>>& files, CounterRegistry& counters,
      const LimitChecker& check_limit, const RuleLoadOptions& options = {});

  const Domain* FindDomain(std::string_view name) const;
  const std::vector<std::unique_ptr<Domain>>& domains() const { return domains_; }

  // The rule a request descriptor matches in `domain`, as envoyproxy/ratelimit matches it:
  // at each level the entry's key with its exact value, else with the first wildcard value
  // (in file order) that matches it, else the key alone; the rule is the node reached by the
  // last entry, so the request's depth must equal the rule's. nullptr when nothing matches.
  // Key and value are matched as two fields (theirs matches "KEY_VALUE" as one string, so
  // that source=cluster_proxy hits a rule for source_cluster=proxy; ours does not).
  // When `path` is given, *path is the node matched for each entry, in order (the last one
  // holds the rule), if a rule is returned, and empty otherwise.
  static const Rule* Match(const Domain& domain, const std::vector<Entry>& entries,
                           std::vector<const DescriptorNode*>* path = nullptr);

 private:
  std::vector<std::unique_ptr<Domain>> domains_;
};

// How a request descriptor went down its domain's tree: what RuleSet::Match did, told for an
// explanation (POST /v1/check's "explain"). Found by the same steps as Match, so that it names
// the rule Match returns.
struct MatchReport {
  enum class Outcome : uint8_t {
    kRule,     // `rule` matched.
    kNoKey,    // entries[entry]'s key is no descriptor key at that level.
    kNoValue,  // entries[entry]'s key is, but neither its value, nor a wildcard, nor the key
               // alone (a descriptor with no value) matches it.
    kNoLimit,  // Every entry matched, but the last node holds no limit (a rule is deeper, or
               // the descriptor had no entries).
  };
  Outcome outcome = Outcome::kNoLimit;
  const Rule* rule = nullptr;
  // The nodes matched, in order, as the rules name them: "key", "key_value", "key_pre*".
  std::vector<std::string> path;
  size_t entry = 0;                    // kNoKey, kNoValue: the entry that found nothing.
  std::vector<std::string> wildcards;  // kNoValue: the wildcard values tried, as written.
};
MatchReport ExplainMatch(const Domain& domain, const std::vector<Entry>& entries);
// The report in a sentence: "rule api.user_*" or why there is none, naming the entry, key and
// level ("no rule: ...").
std::string DescribeMatch(const Domain& domain, const std::vector<Entry>& entries,
                          const MatchReport& report);

// The rules in force as envoyproxy/ratelimit's debug port shows them (GET /rlconfig): one line
// per limit, "rl.foo_bar: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode:
// false", domains and descriptors in file order (server/rules/dump.cc).
std::string DumpRules(const RuleSet& rules);
// The rule whose path (Rule::path, the domain first) is `path`, or nullptr (dump.cc).
const Rule* FindRule(const RuleSet& rules, std::string_view path);

}  // namespace sluice::server
