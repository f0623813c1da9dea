// A descriptor's `metadata`, as FileParser reads it (parser.h): the YAML mapping turned into
// the text of a JSON object whose values are typed as envoyproxy/ratelimit types them. Theirs
// decodes the mapping with yaml.v2 (YAML 1.1's plain scalars: yes/no/on/off are booleans, 0x1F
// and 0o17 and 017 integers, 1_000 is 1000) and converts it with structpb.NewStruct; the
// service turns this text into the same google.protobuf.Struct for Envoy's dynamic metadata.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

#include "server/rules/parser.h"

namespace sluice::server {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kTagPrefix = "tag:yaml.org,2002:";
constexpr int kMaxDepth = 64;

// A node the metadata cannot hold, and why; FileParser::MetadataJson names its place.
struct MetadataError {
  YAML::Node node;
  std::string what;
};

// Go's strconv.ParseUint(s, 0, 64): a 0x, 0o or 0b prefix or a leading 0 (octal) picks the
// base; nullopt on a syntax error or overflow.
std::optional<uint64_t> GoParseUint(std::string_view s) {
  int base = 10;
  if (s.size() >= 3 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  } else if (s.size() >= 3 && s[0] == '0' && (s[1] == 'o' || s[1] == 'O')) {
    base = 8;
    s.remove_prefix(2);
  } else if (s.size() >= 3 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B')) {
    base = 2;
    s.remove_prefix(2);
  } else if (!s.empty() && s[0] == '0') {
    base = 8;
    s.remove_prefix(1);
    if (s.empty()) {
      return 0;
    }
  }
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value, base);
  if (s.empty() || error != std::errc() || end != s.data() + s.size()) {
    return std::nullopt;
  }
  return value;
}

// Go's strconv.ParseInt(s, 0, 64): a sign, then as GoParseUint.
std::optional<int64_t> GoParseInt(std::string_view s) {
  const bool negative = !s.empty() && s[0] == '-';
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    s.remove_prefix(1);
  }
  const std::optional<uint64_t> magnitude = GoParseUint(s);
  constexpr uint64_t kMax = static_cast<uint64_t>(INT64_MAX);
  if (!magnitude || *magnitude > kMax + (negative ? 1 : 0)) {
    return std::nullopt;
  }
  return negative ? static_cast<int64_t>(0 - *magnitude) : static_cast<int64_t>(*magnitude);
}

// A finite double from the whole of `s` (a leading '+' allowed); nullopt otherwise, and for a
// value out of range (Go's ParseFloat fails there too, and yaml.v2 keeps the text).
std::optional<double> ParseDouble(std::string_view s) {
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
  }
  double value = 0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || error != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// A plain scalar as yaml.v2's resolve() types it (its resolveTable and resolveMap).
Json ResolvePlain(const YAML::Node& node, const std::string& text) {
  static const auto* const kWords = new std::map<std::string_view, Json>{
      {"y", true},       {"Y", true},      {"yes", true},    {"Yes", true},    {"YES", true},
      {"true", true},    {"True", true},   {"TRUE", true},   {"on", true},     {"On", true},
      {"ON", true},      {"n", false},     {"N", false},     {"no", false},    {"No", false},
      {"NO", false},     {"false", false}, {"False", false}, {"FALSE", false}, {"off", false},
      {"Off", false},    {"OFF", false},   {"", nullptr},    {"~", nullptr},   {"null", nullptr},
      {"Null", nullptr}, {"NULL", nullptr}};
  if (const auto word = kWords->find(text); word != kWords->end()) {
    return word->second;
  }
  static const auto* const kNonFinite =
      new std::set<std::string_view>{".nan",  ".NaN",  ".NAN",  ".inf",  ".Inf",  ".INF",
                                     "+.inf", "+.Inf", "+.INF", "-.inf", "-.Inf", "-.INF"};
  if (kNonFinite->contains(text)) {
    throw MetadataError{node, fmt::format("metadata value '{}' is not a finite number (JSON and "
                                          "Envoy's metadata have none)",
                                          text)};
  }
  const char first = text.empty() ? '\0' : text[0];
  if (first == '.') {
    if (const std::optional<double> value = ParseDouble(text)) {
      return *value;
    }
    return text;
  }
  if (first != '+' && first != '-' && (first < '0' || first > '9')) {
    return text;
  }
  std::string plain = text;
  std::erase(plain, '_');
  if (const std::optional<int64_t> value = GoParseInt(plain)) {
    return *value;
  }
  if (const std::optional<uint64_t> value = GoParseUint(plain)) {
    return *value;
  }
  static const auto* const kFloat =
      new std::regex(R"(^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$)");
  if (std::regex_match(plain, *kFloat)) {
    if (const std::optional<double> value = ParseDouble(plain)) {
      return *value;
    }
  }
  return text;  // Timestamps too: yaml.v2 keeps their text when decoding into interface{}.
}

// A scalar: quoted ones are strings; plain ones resolved; an explicit standard tag must agree
// with what its text resolves to (yaml.v2 fails otherwise), !!float taking integers too.
Json Scalar(const YAML::Node& node) {
  const std::string& tag = node.Tag();
  const std::string& text = node.Scalar();
  if (tag == "?") {
    return ResolvePlain(node, text);
  }
  if (tag == "!" || !tag.starts_with(kTagPrefix) || tag == std::string(kTagPrefix) + "str") {
    return text;  // Quoted, a tag of the user's own (yaml.v2 keeps the text), or !!str.
  }
  const std::string_view type = std::string_view(tag).substr(kTagPrefix.size());
  if (type == "binary") {
    throw MetadataError{node, "metadata has no !!binary values (Envoy's metadata holds text)"};
  }
  Json value = ResolvePlain(node, text);
  const bool agrees = (type == "int" && value.is_number_integer()) ||
                      (type == "float" && value.is_number()) ||
                      (type == "bool" && value.is_boolean()) || (type == "null" && value.is_null());
  if (!agrees) {
    throw MetadataError{node, fmt::format("metadata value '{}' is not a !!{}", text, type)};
  }
  return type == "float" ? Json(value.get<double>()) : value;
}

// Go's fmt %v of a float64, as their convertMap names a key: the shortest digits that read
// back, in %e form when the exponent is below -4 or at least 6.
std::string GoFloatText(double value) {
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  const std::string_view text(buffer, result.ptr - buffer);
  const size_t e = text.find('e');
  std::string digits(text.substr(0, e));
  const bool negative = digits[0] == '-';
  std::erase(digits, '-');
  std::erase(digits, '.');
  const int exponent = std::stoi(std::string(text.substr(e + 1)));
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 6) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) {
      out += "." + digits.substr(1);
    }
    return out + fmt::format("e{}{:02}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (exponent < 0) {
    return out + "0." + std::string(-exponent - 1, '0') + digits;
  }
  if (digits.size() <= static_cast<size_t>(exponent) + 1) {
    return out + digits + std::string(exponent + 1 - digits.size(), '0');
  }
  return out + digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
}

Json Value(const YAML::Node& node, int depth);

// A mapping. Keys of the top level are their text (their Metadata is a map[string]); deeper
// ones are resolved like values and printed with Go's %v (their convertMap). A later key of
// the same name wins, as in Go's map.
Json Mapping(const YAML::Node& node, int depth) {
  Json object = Json::object();
  for (const auto& item : node) {
    std::string key;
    if (item.first.IsNull()) {
      key = depth == 0 ? "" : "<nil>";
    } else if (!item.first.IsScalar()) {
      throw MetadataError{item.first, "a metadata key must be a scalar"};
    } else if (depth == 0) {
      key = item.first.Scalar();
    } else {
      const Json resolved = Scalar(item.first);
      key = resolved.is_string()         ? resolved.get<std::string>()
            : resolved.is_number_float() ? GoFloatText(resolved.get<double>())
            : resolved.is_null()         ? "<nil>"
                                         : resolved.dump();
    }
    object[key] = Value(item.second, depth + 1);
  }
  return object;
}

Json Value(const YAML::Node& node, int depth) {
  if (depth > kMaxDepth) {
    throw MetadataError{node, fmt::format("metadata is nested deeper than {} levels", kMaxDepth)};
  }
  if (node.IsMap()) {
    return Mapping(node, depth);
  }
  if (node.IsSequence()) {
    Json list = Json::array();
    for (const YAML::Node& item : node) {
      list.push_back(Value(item, depth + 1));
    }
    return list;
  }
  if (node.IsScalar()) {
    return Scalar(node);
  }
  return nullptr;
}

}  // namespace

std::string FileParser::MetadataJson(const YAML::Node& metadata) const {
  if (!metadata.IsMap()) {
    Fail(metadata, "'metadata' must be a mapping");
  }
  try {
    const Json object = Mapping(metadata, 0);
    if (object.empty()) {
      return "";
    }
    return object.dump(-1, ' ', false, Json::error_handler_t::strict);
  } catch (const MetadataError& e) {
    Fail(e.node, e.what);
  } catch (const Json::type_error&) {
    Fail(metadata, "metadata holds text that is not valid UTF-8");
  }
}

}  // namespace sluice::server
