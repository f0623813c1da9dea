#pragma once

// The picture of `sluice simulate --svg`: one lane per limit, time on x. Each lane shows the
// requests (admitted above, rejected below), and, per key, how many units were actually
// admitted in the trailing period ending at each instant, against the limit: where that line
// rises above the limit (a fixed window's edge lets through 2x), the eye sees it, and the
// lane's note says why. A burst gets a panel of its own, zoomed (svg_frame.h), and a legend
// names every series drawn.

#include <string>
#include <vector>

#include "tools/simulate.h"

namespace sluice::tools {

// A self-contained SVG document. REQUIRES: every lane's rows were kept.
std::string RenderSvg(const std::vector<Lane>& lanes);

}  // namespace sluice::tools
