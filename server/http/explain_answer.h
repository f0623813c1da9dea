#pragma once

// The "explain" object of an answer (server/service/explain.h): POST /v1/check's, and POST
// /json's for Envoy's per-descriptor answers. docs/server.md ("Explain") documents it.
//
// Thread-safe: pure functions of their arguments.

#include <string>
#include <vector>

#include "server/service/explain.h"
#include "server/service/service.h"

namespace sluice::server {

// `,"explain":{...}` for a check's answer.
void AppendExplanation(std::string& out, const Explanation& explanation);

// `,"explain":{...}` for an answer of the Envoy API, from each descriptor's explanation (those
// without one are left out); nothing when none has one.
void AppendEnvoyExplanation(std::string& out, const std::vector<DescriptorResult>& results);

}  // namespace sluice::server
