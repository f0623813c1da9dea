#pragma once

// `sluiced --check-config PATH`, as `nginx -t`: the rules file, or directory of them, loaded
// with every check sluiced makes at start (the YAML's bounds, each rule, each limit against
// the store of --store, domains across files with --merge-domains), and nothing else: no
// store opened, nothing bound.

#include <string>

#include "server/daemon/daemon.h"

namespace sluice::server {

// Prints every file's first error to stderr, then the number of errors, and returns 2; or
// prints a summary (files, domains, rule limits) to stdout and returns 0. A file that parses
// alone may still clash with another (a domain defined twice): that error follows.
int CheckConfig(const Flags& flags, const std::string& path);

}  // namespace sluice::server
