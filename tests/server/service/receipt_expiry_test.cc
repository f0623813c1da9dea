// ReceiptExpiry (server/service/receipt.h): the latest GiveBackHorizon over a receipt's limits,
// held within [issued + kMinReceiptLife, issued + kMaxReceiptLife]. The cases use sliding_log,
// whose horizon is exactly the charge's time plus the period.

#include <vector>

#include "gtest/gtest.h"

#include "server/service/receipt.h"
#include "sluice/settle.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using sluice::testing::At;
using sluice::testing::kEpoch;
using sluice::testing::MustLimit;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

ReceiptLimit Log(Micros period, Timestamp at) {
  return {.name = "log",
          .limit = MustLimit({.algorithm = Algorithm::kSlidingLog, .limit = 5, .period = period}),
          .key = "k",
          .charge = {.at = at, .units = 1}};
}

TEST(ReceiptExpiryTest, IsTheLatestHorizonOverTheLimits) {
  const Timestamp issued = At(kEpoch);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(10min, issued)}), issued + 10min);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(5min, issued), Log(20min, issued), Log(10min, issued)}),
            issued + 20min);
  // A horizon measured from the charge's own time, which may be before the receipt's.
  EXPECT_EQ(ReceiptExpiry(issued, {Log(10min, issued - 3min)}), issued + 7min);
}

TEST(ReceiptExpiryTest, LivesAtLeastTheMinimum) {
  const Timestamp issued = At(kEpoch);
  EXPECT_EQ(ReceiptExpiry(issued, {}), issued + kMinReceiptLife);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(1s, issued)}), issued + kMinReceiptLife);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(kMinReceiptLife, issued)}), issued + kMinReceiptLife);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(kMinReceiptLife + 1us, issued)}),
            issued + kMinReceiptLife + 1us);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(1h, issued - 2h)}), issued + kMinReceiptLife);
}

TEST(ReceiptExpiryTest, LivesAtMostTheMaximum) {
  const Timestamp issued = At(kEpoch);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(kMaxReceiptLife, issued)}), issued + kMaxReceiptLife);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(kMaxReceiptLife + 1us, issued)}), issued + kMaxReceiptLife);
  EXPECT_EQ(ReceiptExpiry(issued, {Log(5min, issued), Log(Limit::kMaxPeriod, issued)}),
            issued + kMaxReceiptLife);
}

}  // namespace
}  // namespace sluice::server
