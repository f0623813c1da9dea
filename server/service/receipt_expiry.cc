// ReceiptExpiry apart from the token's code: it is the one part of receipts that reads the
// algorithms (sluice/settle.h's GiveBackHorizon), and signing and checking tokens need none.

#include <algorithm>

#include "server/service/receipt.h"
#include "sluice/settle.h"

namespace sluice::server {

Timestamp ReceiptExpiry(Timestamp issued, const std::vector<ReceiptLimit>& limits) {
  Timestamp latest = issued;
  for (const ReceiptLimit& l : limits) {
    latest = std::max(latest, GiveBackHorizon(l.limit, l.charge));
  }
  // The floor serves a response slower than the horizon (a window about to end); the ceiling
  // bounds how long a store must remember a settled id (receipt.h).
  return std::clamp(latest, issued + kMinReceiptLife, issued + kMaxReceiptLife);
}

}  // namespace sluice::server
