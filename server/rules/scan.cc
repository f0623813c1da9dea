// ScanYaml (scan.h): one pass over a rules file's YAML events, counting what it expands to and
// refusing duplicate keys, second documents, cyclic aliases and deep nesting (aliases
// expanded).

#include "server/rules/scan.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fmt/format.h"
#include "yaml-cpp/eventhandler.h"
#include "yaml-cpp/mark.h"
#include "yaml-cpp/parser.h"

#include "server/rules/parser.h"

namespace sluice::server {
namespace {

// What an anchor names: its expanded size and depth, and its text when it is a scalar (an
// alias used as a mapping's key is that text).
struct Anchored {
  bool open = true;  // Its collection has not ended yet: an alias to it would be a cycle.
  uint64_t nodes = 0;
  uint64_t scalar_bytes = 0;
  // Levels of mappings and lists in what it names, aliases expanded (a scalar's is 0): an
  // alias nests them under the collection it is in, and every walk of the tree recurses
  // through them.
  int64_t depth = 0;
  std::optional<std::string> text;
};

class Scanner final : public YAML::EventHandler {
 public:
  Scanner(const std::string& file, const RuleFileLimits& limits, YamlBudget& budget)
      : file_(file), limits_(limits), budget_(budget) {}

  void OnDocumentStart(const YAML::Mark& mark) override {
    // yaml-cpp 0.7 does not consume a token it cannot place (a ',' outside [] or {}): it starts
    // document after empty document at the same place, for ever (jbeder/yaml-cpp#1040). Every
    // real document starts past the last one.
    if (documents_ > 0 && mark.pos == document_mark_.pos) {
      Fail(mark, "unexpected text that is no YAML node (a ',' outside [] or {}?)");
    }
    ++documents_;
    document_mark_ = mark;
    anchors_.clear();  // yaml-cpp numbers anchors from 1 in each document.
  }
  void OnDocumentEnd() override {}

  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    if (!frames_.empty()) {  // An empty document is no document.
      Node(mark, anchor, 0, std::nullopt);
    }
  }
  void OnScalar(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                const std::string& value) override {
    Node(mark, anchor, value.size(), value);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    SecondDocument(mark);
    if (anchor >= anchors_.size()) {
      Fail(mark, "an alias to an unknown anchor");
    }
    const Anchored& named = anchors_[anchor];
    if (named.open) {
      Fail(mark, "an alias to a node that contains it (a cycle)");
    }
    if (static_cast<int64_t>(frames_.size()) + named.depth > limits_.max_depth) {
      Fail(mark, fmt::format("an alias that nests deeper than {} levels of mappings and lists "
                             "(the depth limit; an alias counts as the levels of what it names: "
                             "{} here, under {})",
                             limits_.max_depth, named.depth, frames_.size()));
    }
    Count(mark, named.nodes, named.scalar_bytes);
    Deepest(named.depth);
    Completed(mark, named.text);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value /*style*/) override {
    Open(mark, anchor, /*map=*/false);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string& /*tag*/, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value /*style*/) override {
    Open(mark, anchor, /*map=*/true);
  }
  void OnMapEnd() override { Close(); }

 private:
  struct Frame {
    bool map = false;
    YAML::anchor_t anchor = 0;
    uint64_t nodes_before = 0;  // budget_ at its start, for its anchor's size.
    uint64_t scalar_bytes_before = 0;
    int64_t below = 0;       // The most levels of a node completed in it, aliases expanded.
    bool expect_key = true;  // Of a mapping: the next node completed is a key.
    std::unordered_map<std::string, int> keys;  // The line of each, from 0.
  };

  [[noreturn]] void Fail(const YAML::Mark& mark, std::string_view what) const {
    throw ConfigError{fmt::format("{}:{}:{}: {}", file_, mark.line + 1, mark.column + 1, what)};
  }

  // YAML::Load reads the first document only: a second with content would be ignored.
  void SecondDocument(const YAML::Mark& mark) const {
    if (documents_ > 1) {
      Fail(mark, fmt::format("a second YAML document (the '---' at line {}): a rules file holds "
                             "one document, as envoyproxy/ratelimit reads one; put each domain "
                             "in a file of its own",
                             document_mark_.line + 1));
    }
  }

  // Adds `nodes` and `scalar_bytes` (of a node, or of all an alias names) to the budget.
  void Count(const YAML::Mark& mark, uint64_t nodes, uint64_t scalar_bytes) {
    budget_.nodes += nodes;
    budget_.scalar_bytes += scalar_bytes;
    if (budget_.nodes > limits_.max_nodes) {
      Fail(mark, fmt::format("the rules expand to more than {} YAML nodes (the node limit; each "
                             "alias counts as all it names)",
                             limits_.max_nodes));
    }
    if (budget_.scalar_bytes > limits_.max_scalar_bytes) {
      Fail(mark, fmt::format("the rules expand to more than {} bytes of keys and values (the "
                             "byte limit; each alias counts as all it names)",
                             limits_.max_scalar_bytes));
    }
  }

  void Node(const YAML::Mark& mark, YAML::anchor_t anchor, uint64_t bytes,
            std::optional<std::string> text) {
    SecondDocument(mark);
    Count(mark, 1, bytes);
    if (anchor != YAML::NullAnchor) {
      Anchored& named = Anchor(anchor);
      named = {.open = false, .nodes = 1, .scalar_bytes = bytes, .text = text};
    }
    Completed(mark, text);
  }

  Anchored& Anchor(YAML::anchor_t anchor) {
    if (anchor >= anchors_.size()) {
      anchors_.resize(anchor + 1);
    }
    return anchors_[anchor];
  }

  void Open(const YAML::Mark& mark, YAML::anchor_t anchor, bool map) {
    SecondDocument(mark);
    if (static_cast<int64_t>(frames_.size()) >= limits_.max_depth) {
      Fail(mark, fmt::format("nesting deeper than {} levels of mappings and lists (the depth "
                             "limit)",
                             limits_.max_depth));
    }
    Count(mark, 1, 0);
    if (anchor != YAML::NullAnchor) {
      Anchor(anchor) = Anchored{};
    }
    frames_.push_back({.map = map,
                       .anchor = anchor,
                       .nodes_before = budget_.nodes - 1,
                       .scalar_bytes_before = budget_.scalar_bytes});
    marks_.push_back(mark);
  }

  void Close() {
    const Frame frame = std::move(frames_.back());
    const YAML::Mark mark = marks_.back();
    frames_.pop_back();
    marks_.pop_back();
    if (frame.anchor != YAML::NullAnchor) {
      anchors_[frame.anchor] = {.open = false,
                                .nodes = budget_.nodes - frame.nodes_before,
                                .scalar_bytes = budget_.scalar_bytes - frame.scalar_bytes_before,
                                .depth = frame.below + 1};
    }
    Deepest(frame.below + 1);
    Completed(mark, std::nullopt);
  }

  // A node of `depth` levels is complete: the innermost collection is at least one deeper.
  void Deepest(int64_t depth) {
    if (!frames_.empty()) {
      frames_.back().below = std::max(frames_.back().below, depth);
    }
  }

  // A node of the innermost collection is complete: in a mapping, a key or its value.
  void Completed(const YAML::Mark& mark, const std::optional<std::string>& text) {
    if (frames_.empty() || !frames_.back().map) {
      return;
    }
    Frame& map = frames_.back();
    if (map.expect_key && text) {
      if (const auto [first, added] = map.keys.emplace(*text, mark.line); !added) {
        Fail(mark, fmt::format("duplicate key '{}' (first at line {}): a key may appear once "
                               "in a mapping",
                               *text, first->second + 1));
      }
    }
    map.expect_key = !map.expect_key;
  }

  const std::string& file_;
  const RuleFileLimits& limits_;
  YamlBudget& budget_;
  int documents_ = 0;
  YAML::Mark document_mark_;
  std::vector<Frame> frames_;
  std::vector<YAML::Mark> marks_;
  std::vector<Anchored> anchors_;  // By anchor number.
};

}  // namespace

void ScanYaml(const std::string& file, const std::string& text, const RuleFileLimits& limits,
              YamlBudget& budget) {
  budget.file_bytes += text.size();
  if (budget.file_bytes > limits.max_file_bytes) {
    throw ConfigError{
        fmt::format("{}:1:1: the rules files are more than {} bytes (the file "
                    "size limit)",
                    file, limits.max_file_bytes)};
  }
  std::istringstream in(text);
  YAML::Parser parser(in);
  Scanner scanner(file, limits, budget);
  while (parser.HandleNextDocument(scanner)) {
  }
}

}  // namespace sluice::server
