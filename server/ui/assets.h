#pragma once

// The operator's page's files (server/ui/page/), built into sluiced by server/ui/embed.cmake.

#include <span>
#include <string_view>

namespace sluice::server {

struct Asset {
  std::string_view name;  // "index.html": the page's URL is /ui/ followed by it.
  std::string_view content_type;
  std::string_view body;
};

// Every file, in name order.
std::span<const Asset> PageAssets();

}  // namespace sluice::server
