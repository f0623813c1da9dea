#pragma once

// ScanYaml: a rules file read as YAML events, before any tree is built or walked, checking
// what the YAML expands to against RuleFileLimits (rules.h). yaml-cpp resolves an alias to the
// node it names, shared, so a file of anchors whose levels each list aliases of the one below
// loads in a few kilobytes and expands to billions of nodes when anything walks it (the
// loader does: RemoveNulls, FileParser, a descriptor's metadata). The scan adds up, for each
// anchor, the nodes and scalar bytes of what it names, and adds that for each alias, so the
// expanded size is known before anything expands it and a bomb is refused at the alias that
// crosses the limit, in time and memory linear in the file.
//
// It also refuses what yaml-cpp would load silently or wrongly: a key twice in one mapping
// (yaml-cpp's node["key"] finds the first, so the second would be ignored), a second document
// (YAML::Load reads the first), an alias to a node that encloses it (a cycle, on which every
// walk would recurse without end), and nesting deeper than the limit, as written (before
// yaml-cpp's own guard, whose message is "bad file") or through aliases: each anchor's depth is
// kept, so a chain of anchors each aliasing the last deep down, which would nest thousands of
// levels within the node limit and overflow the stack of whatever walks it, is refused at the
// alias that passes the limit.
//
// Private to server/rules/: RuleSet::Parse (load.cc) calls it on every file. Not thread-safe:
// one scan per file, one thread; YamlBudget is shared by the files of one load.

#include <cstdint>
#include <string>

#include "server/rules/rules.h"

namespace sluice::server {

// What the files of one load have used so far of RuleFileLimits.
struct YamlBudget {
  uint64_t file_bytes = 0;
  uint64_t nodes = 0;         // Every alias expanded.
  uint64_t scalar_bytes = 0;  // Every alias expanded.
  uint64_t descriptors = 0;   // Counted by FileParser as it reads them.
  uint64_t limits = 0;        // Rule limits, counted by FileParser.
};

// Scans `text`, the YAML of `file`, adding to `budget`. Throws ConfigError (parser.h)
// "FILE:LINE:COLUMN: what is wrong" at the first thing refused; YAML::Exception for a syntax
// error.
void ScanYaml(const std::string& file, const std::string& text, const RuleFileLimits& limits,
              YamlBudget& budget);

}  // namespace sluice::server
