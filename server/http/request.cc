#include "server/http/request.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <utility>

#include "fmt/format.h"
#include "simdjson.h"

#include "src/core/status.h"

namespace sluice::server {
namespace {

using JsonObject = simdjson::dom::object;
using JsonValue = simdjson::dom::element;

// The body of a POST as a JSON object; InvalidArgument when it is not one. Read with
// simdjson, through a parser per thread that keeps its buffers: a request allocates nothing
// to be parsed (a JSON document of nlohmann's was a quarter of all the work of a check). The
// object lives in that parser: read it whole before the thread parses again.
absl::StatusOr<JsonObject> ParseObject(const HttpRequest& request) {
  thread_local simdjson::dom::parser parser;
  JsonValue body;
  switch (parser.parse(request.body()).get(body)) {
    case simdjson::SUCCESS:
      break;
    case simdjson::NUMBER_ERROR:
      return absl::InvalidArgumentError("malformed JSON: a number out of range");
    case simdjson::UTF8_ERROR:
      return absl::InvalidArgumentError("malformed JSON: not UTF-8");
    default:
      return absl::InvalidArgumentError("malformed JSON");
  }
  JsonObject object;
  if (body.get_object().get(object) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("the body must be a JSON object");
  }
  return object;
}

// Where an object sits in a request body, for the errors that name a field by its path:
// "descriptors[1].entries[0].key". Spelled out only when an error is reported.
struct Where {
  static constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t descriptor = kNone;
  size_t entry = kNone;
  bool limit = false;  // The descriptor's "limit".

  std::string Path() const {
    if (descriptor == kNone) {
      return "";
    }
    std::string path = fmt::format("descriptors[{}]", descriptor);
    if (entry != kNone) {
      fmt::format_to(std::back_inserter(path), ".entries[{}]", entry);
    }
    if (limit) {
      path += ".limit";
    }
    return path;
  }
  std::string Name(std::string_view field) const {
    return descriptor == kNone ? std::string(field) : fmt::format("{}.{}", Path(), field);
  }
};

// Reads the fields of one JSON object, with errors that name the field by its path.
class Fields {
 public:
  Fields(JsonObject object, Where where) : object_(object), where_(where) {}

  // Every field is one of `known`, and none appears twice (which of two would count is
  // nobody's guess).
  // `also`, when not empty, is one more known field.
  absl::Status OnlyKnown(std::initializer_list<std::string_view> known,
                         std::string_view also = {}) const {
    uint32_t seen = 0;  // Bit i: known[i] has appeared; bit known.size(): `also` has.
    for (const auto field : object_) {
      const auto it = std::find(known.begin(), known.end(), field.key);
      if (it == known.end() && (also.empty() || field.key != also)) {
        return absl::InvalidArgumentError(fmt::format("unknown field '{}'", Name(field.key)));
      }
      const uint32_t bit = uint32_t{1} << (it - known.begin());
      if ((seen & bit) != 0) {
        return absl::InvalidArgumentError(fmt::format("field '{}' appears twice", Name(field.key)));
      }
      seen |= bit;
    }
    return absl::OkStatus();
  }

  // The first of `names` present (a protobuf JSON field may be spelled either way).
  std::optional<JsonValue> Find(std::initializer_list<const char*> names) const {
    for (const char* name : names) {
      JsonValue value;
      if (object_.at_key(name).get(value) == simdjson::SUCCESS) {
        return value;
      }
    }
    return std::nullopt;
  }

  absl::StatusOr<std::optional<std::string>> String(const char* name) const {
    const std::optional<JsonValue> value = Find({name});
    if (!value) {
      return std::nullopt;
    }
    std::string_view text;
    if (value->get_string().get(text) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{} must be a string", Name(name)));
    }
    return std::string(text);
  }

  // An integer field; `quoted` also accepts the string form protobuf JSON uses for 64 bits.
  absl::StatusOr<std::optional<int64_t>> Integer(std::initializer_list<const char*> names,
                                                 bool quoted = false) const {
    const std::optional<JsonValue> value = Find(names);
    if (!value) {
      return std::nullopt;
    }
    switch (value->type()) {
      case simdjson::dom::element_type::INT64:
        return value->get_int64().value_unsafe();
      case simdjson::dom::element_type::UINT64:  // Only what int64 cannot hold.
        return absl::InvalidArgumentError(fmt::format("{} is too large", Name(*names.begin())));
      case simdjson::dom::element_type::STRING:
        if (quoted) {
          const std::string_view text = value->get_string().value_unsafe();
          int64_t n = 0;
          const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
          if (ec == std::errc() && end == text.data() + text.size() && !text.empty()) {
            return n;
          }
        }
        break;
      default:
        break;
    }
    return absl::InvalidArgumentError(fmt::format("{} must be an integer", Name(*names.begin())));
  }

  absl::StatusOr<std::optional<bool>> Bool(const char* name) const {
    const std::optional<JsonValue> value = Find({name});
    if (!value) {
      return std::nullopt;
    }
    bool flag = false;
    if (value->get_bool().get(flag) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{} must be true or false", Name(name)));
    }
    return flag;
  }

  std::string Name(std::string_view name) const { return where_.Name(name); }

 private:
  JsonObject object_;
  Where where_;
};

// Checks an optional integer field: when present it must be at least `min`.
absl::StatusOr<std::optional<int64_t>> AtLeast(absl::StatusOr<std::optional<int64_t>> value,
                                               const Fields& fields, const char* name,
                                               int64_t min) {
  if (value.ok() && *value && **value < min) {
    return absl::InvalidArgumentError(fmt::format("{} must be {}, not {}", fields.Name(name),
                                                  min == 0 ? "zero or more" : "positive", **value));
  }
  return value;
}

// One descriptor's "entries": [{"key", "value"}, ...], read into `descriptor`.
// The Envoy API's (`envoy`) are not bounded in number, as envoyproxy/ratelimit's are not.
absl::Status ParseEntries(const Fields& fields, Where where, bool envoy,
                          RequestDescriptor& descriptor) {
  simdjson::dom::array entries;
  if (const std::optional<JsonValue> found = fields.Find({"entries"});
      !found || found->get_array().get(entries) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(fmt::format("{}.entries must be an array", where.Path()));
  }
  if (!envoy && entries.size() > kMaxEntries) {
    return absl::InvalidArgumentError(
        fmt::format("{}.entries has too many entries: {} (at most {})", where.Path(),
                    entries.size(), kMaxEntries));
  }
  descriptor.entries.reserve(entries.size());
  for (const JsonValue entry : entries) {
    const Where entry_where{.descriptor = where.descriptor, .entry = descriptor.entries.size()};
    JsonObject entry_object;
    if (entry.get_object().get(entry_object) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{} must be an object", entry_where.Path()));
    }
    const Fields entry_fields(entry_object, entry_where);
    if (absl::Status s = entry_fields.OnlyKnown({"key", "value"}); !s.ok()) {
      return s;
    }
    absl::StatusOr<std::optional<std::string>> key = entry_fields.String("key");
    absl::StatusOr<std::optional<std::string>> value = entry_fields.String("value");
    if (!key.ok()) {
      return key.status();
    }
    if (!value.ok()) {
      return value.status();
    }
    if (!*key) {
      return absl::InvalidArgumentError(fmt::format("{}.key is missing", entry_where.Path()));
    }
    descriptor.entries.push_back({.key = **std::move(key), .value = value->value_or("")});
  }
  return absl::OkStatus();
}

// Envoy's per-descriptor "hitsAddend" and "limit" (in place of the request's cost and of the
// rules), read into `descriptor`.
absl::Status ParseOverrides(const Fields& fields, Where where, RequestDescriptor& descriptor) {
  absl::StatusOr<std::optional<int64_t>> hits = AtLeast(
      fields.Integer({"hitsAddend", "hits_addend"}, /*quoted=*/true), fields, "hitsAddend", 0);
  if (!hits.ok()) {
    return hits.status();
  }
  descriptor.cost = *hits;
  if (const std::optional<JsonValue> limit = fields.Find({"limit"})) {
    const Where limit_where{.descriptor = where.descriptor, .limit = true};
    JsonObject limit_object;
    if (limit->get_object().get(limit_object) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{} must be an object", limit_where.Path()));
    }
    const Fields limit_fields(limit_object, limit_where);
    if (absl::Status s = limit_fields.OnlyKnown({"requestsPerUnit", "requests_per_unit", "unit"});
        !s.ok()) {
      return s;
    }
    absl::StatusOr<std::optional<int64_t>> count =
        AtLeast(limit_fields.Integer({"requestsPerUnit", "requests_per_unit"}), limit_fields,
                "requestsPerUnit", 0);
    if (!count.ok()) {
      return count.status();
    }
    LimitOverride& override = descriptor.limit.emplace();
    override.requests_per_unit = count->value_or(0);
    if (const std::optional<JsonValue> unit = limit_fields.Find({"unit"})) {
      std::string_view name;
      int64_t number = 0;
      if (unit->get_string().get(name) == simdjson::SUCCESS) {
        override.unit = ParseUnit(name).value_or(Unit::kUnknown);
      } else if (unit->get_int64().get(number) == simdjson::SUCCESS && number >= 0 && number <= 7) {
        override.unit = static_cast<Unit>(number);
      }
    }
    if (override.unit == Unit::kUnknown) {
      return absl::InvalidArgumentError(fmt::format(
          "{}.unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", limit_where.Path()));
    }
  }
  return absl::OkStatus();
}

// The descriptors of a rules-mode or Envoy request: [{"entries": [{"key", "value"}], ...}].
absl::StatusOr<std::vector<RequestDescriptor>> ParseDescriptors(JsonObject body, bool envoy) {
  JsonValue list;
  if (body.at_key("descriptors").get(list) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("descriptors is missing");
  }
  simdjson::dom::array items;
  if (list.get_array().get(items) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("descriptors must be an array");
  }
  if (!envoy && items.size() > kMaxDescriptors) {
    return absl::InvalidArgumentError(
        fmt::format("too many descriptors: {} (at most {})", items.size(), kMaxDescriptors));
  }
  std::vector<RequestDescriptor> descriptors;
  descriptors.reserve(items.size());
  for (const JsonValue item : items) {
    const Where where{.descriptor = descriptors.size()};
    JsonObject object;
    if (item.get_object().get(object) != simdjson::SUCCESS) {
      return absl::InvalidArgumentError(fmt::format("{} must be an object", where.Path()));
    }
    const Fields fields(object, where);
    if (absl::Status s = envoy ? fields.OnlyKnown({"entries", "limit", "hitsAddend", "hits_addend"})
                               : fields.OnlyKnown({"entries"});
        !s.ok()) {
      return s;
    }
    RequestDescriptor& descriptor = descriptors.emplace_back();
    if (absl::Status s = ParseEntries(fields, where, envoy, descriptor); !s.ok()) {
      return s;
    }
    if (!envoy) {
      continue;
    }
    if (absl::Status s = ParseOverrides(fields, where, descriptor); !s.ok()) {
      return s;
    }
  }
  return descriptors;
}

// POST /v1/acquire's "max_wait", a duration, read into `max_wait` when given.
absl::Status ParseMaxWait(const Fields& fields, std::optional<Micros>* max_wait) {
  absl::StatusOr<std::optional<std::string>> text = fields.String("max_wait");
  if (!text.ok()) {
    return text.status();
  }
  if (*text) {
    absl::StatusOr<Micros> wait = ParseDuration(**text);
    if (!wait.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("max_wait: {}", internal::Message(wait.status())));
    }
    *max_wait = *wait;
  }
  return absl::OkStatus();
}

// An ad hoc limit's period: a duration, or with `calendar` a calendar quota's unit named as a
// period ("1mo") in `time_zone`.
absl::Status ReadPeriod(std::string_view period, bool calendar,
                        const std::optional<std::string>& time_zone, LimitSpec& spec) {
  if (calendar) {
    // A calendar quota: its unit from the period's name, its length from the calendar.
    const std::optional<CalendarUnit> unit = ParseCalendarPeriod(period);
    if (!unit) {
      return absl::InvalidArgumentError(
          fmt::format("period: a calendar quota's period is 1d, 1w, 1mo or 1y, not '{}'",
                      period.substr(0, 32)));
    }
    spec.calendar = Calendar{*unit, time_zone.value_or("UTC")};
  } else if (time_zone) {
    return absl::InvalidArgumentError(
        "time_zone needs \"calendar\": true (a window of a fixed period starts at the epoch, "
        "in no zone)");
  } else {
    absl::StatusOr<Micros> parsed_period = ParseDuration(period);
    if (!parsed_period.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("period: {}", internal::Message(parsed_period.status())));
    }
    spec.period = *parsed_period;
  }
  return absl::OkStatus();
}

// An ad hoc limit's "feedback": true, "max_pause" and "pause" (server/service/feedback.h).
absl::Status ParseAdHocFeedback(const Fields& fields, AdHocRequest& adhoc) {
  absl::StatusOr<std::optional<bool>> on = fields.Bool("feedback");
  absl::StatusOr<std::optional<std::string>> max = fields.String("max_pause");
  absl::StatusOr<std::optional<std::string>> pause = fields.String("pause");
  for (const absl::Status& s : {on.status(), max.status(), pause.status()}) {
    if (!s.ok()) {
      return s;
    }
  }
  const absl::StatusOr<Micros> max_pause = ParseDuration(max->value_or("1h"));
  const absl::StatusOr<Micros> pause_for = ParseDuration(pause->value_or(""));
  if ((*max || *pause) && !on->value_or(false)) {
    return absl::InvalidArgumentError("max_pause and pause need \"feedback\": true");
  }
  const Micros d = *pause ? pause_for.value_or(Micros{-1})
                          : std::min(FeedbackPolicy{}.pause, max_pause.value_or(Micros{0}));
  if (!max_pause.ok() || *max_pause < kMinMaxPause || *max_pause > kMaxMaxPause || d < Micros{0} ||
      d > *max_pause) {
    return absl::InvalidArgumentError(
        fmt::format("max_pause must be a duration of {} to {}, and pause one of 0 to max_pause",
                    FormatDuration(kMinMaxPause), FormatDuration(kMaxMaxPause)));
  }
  if (on->value_or(false)) {
    adhoc.feedback = FeedbackPolicy{.max_pause = *max_pause, .pause = d};
  }
  return absl::OkStatus();
}

// An ad hoc check: the limit is in the request; `also`, one more known field; `cost`, checked.
absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> ParseAdHoc(const Fields& fields,
                                                                    std::string_view also,
                                                                    std::optional<int64_t> cost) {
  if (absl::Status s = fields.OnlyKnown(
          {"key", "algorithm", "limit", "period", "burst", "buckets", "cost", "receipt", "max_debt",
           "block", "calendar", "time_zone", "explain", "feedback", "max_pause", "pause"},
          also);
      !s.ok()) {
    return s;
  }
  AdHocRequest adhoc;
  adhoc.cost = cost.value_or(1);
  absl::StatusOr<std::optional<std::string>> key = fields.String("key");
  absl::StatusOr<std::optional<std::string>> algorithm = fields.String("algorithm");
  absl::StatusOr<std::optional<std::string>> period = fields.String("period");
  absl::StatusOr<std::optional<int64_t>> limit = fields.Integer({"limit"});
  absl::StatusOr<std::optional<int64_t>> burst = fields.Integer({"burst"});
  absl::StatusOr<std::optional<int64_t>> buckets = fields.Integer({"buckets"});
  absl::StatusOr<std::optional<bool>> receipt = fields.Bool("receipt");
  absl::StatusOr<std::optional<bool>> explain = fields.Bool("explain");
  absl::StatusOr<std::optional<std::string>> block = fields.String("block");
  absl::StatusOr<std::optional<bool>> calendar = fields.Bool("calendar");
  absl::StatusOr<std::optional<std::string>> time_zone = fields.String("time_zone");
  absl::StatusOr<std::optional<int64_t>> max_debt =
      AtLeast(fields.Integer({"max_debt"}), fields, "max_debt", 0);
  for (const absl::Status& s :
       {key.status(), algorithm.status(), period.status(), limit.status(), burst.status(),
        buckets.status(), receipt.status(), max_debt.status(), block.status(), calendar.status(),
        time_zone.status(), explain.status()}) {
    if (!s.ok()) {
      return s;
    }
  }
  if (!*limit) {
    return absl::InvalidArgumentError("limit is missing");
  }
  if (!*period) {
    return absl::InvalidArgumentError("period is missing (a duration such as \"1s\")");
  }
  adhoc.key = **key;
  adhoc.receipt = receipt->value_or(false);
  adhoc.explain = explain->value_or(false);
  adhoc.max_debt = *max_debt;
  if (*block) {
    absl::StatusOr<Micros> duration = ParseDuration(**block);
    if (!duration.ok()) {
      return absl::InvalidArgumentError(
          fmt::format("block: {}", internal::Message(duration.status())));
    }
    adhoc.block = *duration;
  }
  if (absl::Status s = ParseAdHocFeedback(fields, adhoc); !s.ok()) {
    return s;
  }
  if (*algorithm) {
    absl::StatusOr<Algorithm> parsed = ParseAlgorithm(**algorithm);
    if (!parsed.ok()) {
      return parsed.status();
    }
    adhoc.spec.algorithm = *parsed;
  }
  adhoc.spec.limit = **limit;
  if (absl::Status s = ReadPeriod(**period, calendar->value_or(false), *time_zone, adhoc.spec);
      !s.ok()) {
    return s;
  }
  adhoc.spec.burst = *burst;
  adhoc.spec.buckets = *buckets;
  return adhoc;
}

// A rules-mode check: a domain and descriptors, read from `body`; `also` and `cost` as for
// ParseAdHoc.
absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> ParseRulesMode(
    JsonObject body, const Fields& fields, std::string_view also, std::optional<int64_t> cost) {
  if (absl::Status s =
          fields.OnlyKnown({"domain", "descriptors", "cost", "receipt", "explain"}, also);
      !s.ok()) {
    return s;
  }
  CheckRequest check;
  check.cost = cost.value_or(1);
  absl::StatusOr<std::optional<bool>> receipt = fields.Bool("receipt");
  absl::StatusOr<std::optional<bool>> explain = fields.Bool("explain");
  for (const absl::Status& s : {receipt.status(), explain.status()}) {
    if (!s.ok()) {
      return s;
    }
  }
  check.receipt = receipt->value_or(false);
  check.explain = explain->value_or(false);
  absl::StatusOr<std::optional<std::string>> domain = fields.String("domain");
  if (!domain.ok()) {
    return domain.status();
  }
  if (!*domain) {
    return absl::InvalidArgumentError(
        "give either a domain and descriptors (rules mode) or a key and a limit (ad hoc)");
  }
  check.domain = **domain;
  absl::StatusOr<std::vector<RequestDescriptor>> descriptors =
      ParseDescriptors(body, /*envoy=*/false);
  if (!descriptors.ok()) {
    return descriptors.status();
  }
  check.descriptors = *std::move(descriptors);
  return check;
}

}  // namespace

absl::StatusOr<std::variant<AdHocRequest, CheckRequest>> ParseCheck(const HttpRequest& request,
                                                                    std::optional<Micros>* max_wait,
                                                                    std::string_view also_field) {
  absl::StatusOr<JsonObject> parsed = ParseObject(request);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const JsonObject body = *parsed;
  const Fields fields(body, Where{});
  const std::string_view also = max_wait != nullptr ? "max_wait" : also_field;
  if (max_wait != nullptr) {
    if (absl::Status s = ParseMaxWait(fields, max_wait); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::optional<int64_t>> cost =
      AtLeast(fields.Integer({"cost"}), fields, "cost", 0);
  if (!cost.ok()) {
    return cost.status();
  }
  if (fields.Find({"key"})) {
    return ParseAdHoc(fields, also, *cost);
  }
  return ParseRulesMode(body, fields, also, *cost);
}

absl::StatusOr<std::string> ParseRelease(const HttpRequest& request) {
  absl::StatusOr<JsonObject> parsed = ParseObject(request);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const Fields fields(*parsed, Where{});
  if (absl::Status s = fields.OnlyKnown({"lease"}, ""); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::optional<std::string>> lease = fields.String("lease");
  if (!lease.ok()) {
    return lease.status();
  }
  if (!*lease) {
    return absl::InvalidArgumentError("lease is missing");
  }
  return **lease;
}

absl::StatusOr<SettleRequest> ParseSettle(const HttpRequest& request) {
  absl::StatusOr<JsonObject> parsed = ParseObject(request);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const Fields fields(*parsed, Where{});
  if (absl::Status s = fields.OnlyKnown({"receipt", "cost"}); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::optional<std::string>> receipt = fields.String("receipt");
  absl::StatusOr<std::optional<int64_t>> cost =
      AtLeast(fields.Integer({"cost"}), fields, "cost", 0);
  for (const absl::Status& s : {receipt.status(), cost.status()}) {
    if (!s.ok()) {
      return s;
    }
  }
  if (!*cost) {
    return absl::InvalidArgumentError("cost is missing (what the request really cost; 0 refunds)");
  }
  // An absent receipt is an empty one: the service names it.
  return SettleRequest{.receipt = receipt->value_or(""), .cost = **cost};
}

absl::StatusOr<CheckRequest> ParseEnvoyJson(const HttpRequest& request) {
  absl::StatusOr<JsonObject> parsed = ParseObject(request);
  if (!parsed.ok()) {
    return parsed.status();
  }
  const JsonObject body = *parsed;
  const Fields fields(body, Where{});
  // "explain" is sluice's own (Envoy's message has no such field): the answer explains itself.
  if (absl::Status s =
          fields.OnlyKnown({"domain", "descriptors", "hitsAddend", "hits_addend", "explain"});
      !s.ok()) {
    return s;
  }
  CheckRequest check;
  absl::StatusOr<std::optional<bool>> explain = fields.Bool("explain");
  if (!explain.ok()) {
    return explain.status();
  }
  check.explain = explain->value_or(false);
  absl::StatusOr<std::optional<std::string>> domain = fields.String("domain");
  absl::StatusOr<std::optional<int64_t>> hits =
      AtLeast(fields.Integer({"hitsAddend", "hits_addend"}), fields, "hitsAddend", 0);
  if (!domain.ok()) {
    return domain.status();
  }
  if (!hits.ok()) {
    return hits.status();
  }
  check.domain = domain->value_or("");
  check.cost = std::max<int64_t>(1, hits->value_or(1));  // 0 means 1, as in Envoy's proto.
  if (check.cost > kUint32Max) {
    return absl::InvalidArgumentError("hitsAddend must fit 32 bits");
  }
  absl::StatusOr<std::vector<RequestDescriptor>> descriptors =
      ParseDescriptors(body, /*envoy=*/true);
  if (!descriptors.ok()) {
    return descriptors.status();
  }
  check.descriptors = *std::move(descriptors);
  return check;
}

}  // namespace sluice::server
