// Receipts (server/service/receipt.h): what Sign writes Verify reads back whole, and nothing
// else gets through: no byte of a token can change, no truncation, no other secret, no
// payload that a valid signature covers but that lies about its own sizes, nothing expired.
// The hostile payloads are signed here with the test's own secret, so that the signature
// passes and what is tested is the decoder's bounds.

#include "server/service/receipt.h"

#include <algorithm>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "tests/testing/scratch_dir.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

using sluice::testing::At;
using sluice::testing::kEpoch;
using sluice::testing::MustLimit;
using sluice::testing::ScratchDir;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

__extension__ using UInt128 = unsigned __int128;

const std::string kSecret = "0123456789abcdef0123456789abcdef";  // 32 bytes.
constexpr char kMalformed[] = "receipt is not a receipt from sluiced";
constexpr char kMismatch[] =
    "receipt's signature does not match (forged, changed, or signed with another secret)";

std::string Message(const absl::Status& status) {
  return std::string(status.message().data(), status.message().size());
}

ReceiptSigner Signer(const std::string& secret = kSecret) {
  absl::StatusOr<ReceiptSigner> signer = ReceiptSigner::Create(secret);
  EXPECT_TRUE(signer.ok()) << signer.status();
  return *std::move(signer);
}

std::string Base64Url(std::string_view bytes) {
  return absl::WebSafeBase64Escape(absl::string_view(bytes.data(), bytes.size()));
}
std::string FromBase64Url(std::string_view text) {
  std::string bytes;
  EXPECT_TRUE(absl::WebSafeBase64Unescape(absl::string_view(text.data(), text.size()), &bytes));
  return bytes;
}

// A token for any payload bytes, signed as Sign signs: what a holder of the secret could make,
// and so what tests the decoder rather than the signature.
std::string SignPayload(std::string_view payload, const std::string& secret = kSecret) {
  std::string token = "r1." + Base64Url(payload);
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(token.data()), token.size(), mac, &size);
  return token + "." + Base64Url(std::string_view(reinterpret_cast<const char*>(mac), size));
}

std::string PayloadOf(std::string_view token) {
  const size_t first = token.find('.');
  const size_t last = token.rfind('.');
  return FromBase64Url(token.substr(first + 1, last - first - 1));
}

// The payload's layout, written out independently of receipt.cc (which keeps it private), so
// that a test can say exactly which figure lies.
class Payload {
 public:
  Payload& U8(uint8_t v) {
    bytes_.push_back(static_cast<char>(v));
    return *this;
  }
  Payload& U32(uint32_t v) { return Le(v, 4); }
  Payload& I64(int64_t v) { return Le(static_cast<uint64_t>(v), 8); }
  Payload& I128(Int128 v) {
    Le(static_cast<uint64_t>(static_cast<UInt128>(v)), 8);
    return Le(static_cast<uint64_t>(static_cast<UInt128>(v) >> 64), 8);
  }
  Payload& Str(std::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    bytes_.append(s);
    return *this;
  }
  Payload& Header(std::string_view id, int64_t issued, int64_t expires, int64_t cost,
                  uint32_t count) {
    return Str(id).I64(issued).I64(expires).I64(cost).U32(count);
  }
  Payload& LimitEntry(const ReceiptLimit& l) {
    const bool calendar = l.limit.calendar().has_value();
    Str(l.name).U8(static_cast<uint8_t>(l.limit.algorithm()) | (calendar ? 0x80 : 0));
    I64(l.limit.limit()).I64(calendar ? 0 : l.limit.period().count());
    I64(l.limit.burst()).I64(l.limit.buckets());
    if (calendar) {  // Its unit and zone.
      U8(static_cast<uint8_t>(*l.limit.calendar())).Str(l.limit.time_zone().name());
    }
    Str(l.key);
    return I64(l.charge.at.time_since_epoch().count())
        .I64(l.charge.units)
        .I128(l.charge.ahead)
        .I64(l.max_debt);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  Payload& Le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) {
      U8(static_cast<uint8_t>(v >> (8 * i)));
    }
    return *this;
  }
  std::string bytes_;
};

ReceiptLimit Entry(std::string name, const LimitSpec& spec, Int128 ahead = 0) {
  return {.name = std::move(name),
          .limit = MustLimit(spec),
          .key =
              "api\x1fuser\x1f"
              "bob",
          .charge = {.at = At(kEpoch), .units = 3, .ahead = ahead},
          .max_debt = 7};
}

// A receipt with a limit of every algorithm, and the extremes of what a limit carries: a
// 128-bit ahead beyond 64 bits, a negative one, names and keys with any bytes.
Receipt Several() {
  const Int128 wide = Int128{1} << 100;
  Receipt r{
      .id = "abcdefghijklmnopqrstuv", .issued = At(kEpoch), .expires = At(kEpoch) + 1h, .cost = 3};
  r.limits = {
      Entry("fixed", {.algorithm = Algorithm::kFixedWindow, .limit = 10, .period = 1s}),
      Entry("log", {.algorithm = Algorithm::kSlidingLog, .limit = 5, .period = 1min}),
      Entry("window", {.algorithm = Algorithm::kSlidingWindow, .limit = 100, .period = 1h}),
      Entry("buckets",
            {.algorithm = Algorithm::kSlidingBuckets, .limit = 60, .period = 1min, .buckets = 12}),
      Entry("token", {.algorithm = Algorithm::kTokenBucket, .limit = 10, .period = 1s, .burst = 20},
            wide),
      Entry("gcra", {.algorithm = Algorithm::kGcra, .limit = Limit::kMaxCount, .period = 1s},
            -wide - 12345),
      Entry("leaky", {.algorithm = Algorithm::kLeakyBucket, .limit = 3, .period = 1s, .burst = 1},
            -1),
      Entry("calendar",
            {.limit = 10000, .calendar = Calendar{CalendarUnit::kMonth, "Europe/Berlin"}}, 0),
      Entry(std::string("bin\0.\xff", 6),
            {.algorithm = Algorithm::kGcra, .limit = 1, .period = Limit::kMaxPeriod, .burst = 2},
            static_cast<Int128>(UInt128{1} << 127)),  // The lowest Int128.
  };
  r.limits.back().key = std::string("\0\0.r1.", 6);
  r.limits.back().max_debt = 0;
  r.limits.back().charge = {
      .at = At(-1), .units = 0, .ahead = static_cast<Int128>(~(UInt128{1} << 127))};
  return r;
}

TEST(ReceiptTest, VerifyReadsBackWhatSignWroteForEveryAlgorithm) {
  const ReceiptSigner signer = Signer();
  const Receipt receipt = Several();
  const std::string token = signer.Sign(receipt);
  absl::StatusOr<Receipt> read = signer.Verify(token, receipt.issued);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, receipt);

  Receipt empty{.id = "", .issued = At(0), .expires = At(0), .cost = 0};
  read = signer.Verify(signer.Sign(empty), At(0));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, empty);
}

TEST(ReceiptTest, TokenIsPrefixPayloadAndSignatureInUnpaddedBase64Url) {
  const std::string token = Signer().Sign(Several());
  ASSERT_TRUE(token.starts_with("r1."));
  EXPECT_EQ(std::count(token.begin(), token.end(), '.'), 2);
  EXPECT_EQ(token.find_first_not_of(
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.", 3),
            std::string::npos);
  EXPECT_EQ(token.size() - token.rfind('.') - 1, 43u);  // 32 bytes of HMAC-SHA-256.
  // The layout as documented in receipt.cc, byte for byte: a change to it needs a new prefix.
  Payload p;
  const Receipt r = Several();
  p.Header(r.id, kEpoch, kEpoch + 3'600'000'000, r.cost, static_cast<uint32_t>(r.limits.size()));
  for (const ReceiptLimit& l : r.limits) {
    p.LimitEntry(l);
  }
  EXPECT_EQ(PayloadOf(token), p.bytes());
  EXPECT_EQ(SignPayload(p.bytes()), token);
}

TEST(ReceiptTest, EveryChangeOfOneByteIsRefused) {
  const ReceiptSigner signer = Signer();
  Receipt receipt = Several();
  receipt.limits.erase(receipt.limits.begin() + 3, receipt.limits.end());  // Shorter.
  const std::string token = signer.Sign(receipt);
  std::string replacements =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.= +/";
  replacements += std::string("\0\x7f\x80\xff", 4);
  int tried = 0;
  for (size_t i = 0; i < token.size(); ++i) {
    std::vector<char> changes(replacements.begin(), replacements.end());
    for (int bit = 0; bit < 8; ++bit) {
      changes.push_back(static_cast<char>(token[i] ^ (1 << bit)));
    }
    for (char c : changes) {
      if (c == token[i]) {
        continue;
      }
      std::string changed = token;
      changed[i] = c;
      absl::StatusOr<Receipt> read = signer.Verify(changed, receipt.issued);
      ASSERT_FALSE(read.ok()) << "position " << i << " changed to " << int{c} << " was accepted";
      ASSERT_THAT(Message(read.status()), AnyOf(kMalformed, kMismatch)) << "position " << i;
      ++tried;
    }
  }
  EXPECT_GT(tried, 70 * static_cast<int>(token.size()));
}

TEST(ReceiptTest, AnotherSecretsReceiptIsRefused) {
  const Receipt receipt = Several();
  const std::string token = Signer(kSecret + "x").Sign(receipt);
  absl::StatusOr<Receipt> read = Signer().Verify(token, receipt.issued);
  EXPECT_EQ(read.status(), absl::InvalidArgumentError(kMismatch));
  const ReceiptSigner a = ReceiptSigner::Random();
  const ReceiptSigner b = ReceiptSigner::Random();
  EXPECT_TRUE(a.Verify(a.Sign(receipt), receipt.issued).ok());
  EXPECT_EQ(b.Verify(a.Sign(receipt), receipt.issued).status(),
            absl::InvalidArgumentError(kMismatch));
}

TEST(ReceiptTest, EveryTruncationAndAnExtraByteAreRefused) {
  const ReceiptSigner signer = Signer();
  const Receipt receipt = Several();
  const std::string token = signer.Sign(receipt);
  for (size_t n = 0; n < token.size(); ++n) {
    absl::StatusOr<Receipt> read = signer.Verify(token.substr(0, n), receipt.issued);
    ASSERT_FALSE(read.ok()) << "the first " << n << " bytes were accepted";
    ASSERT_THAT(Message(read.status()), AnyOf(kMalformed, kMismatch, "receipt is empty"));
  }
  for (const char* extra : {"A", "=", ".", "AAAA"}) {
    EXPECT_FALSE(signer.Verify(token + extra, receipt.issued).ok()) << extra;
    EXPECT_FALSE(signer.Verify(extra + token, receipt.issued).ok()) << extra;
  }
}

TEST(ReceiptTest, EmptyIsRefused) {
  EXPECT_EQ(Signer().Verify("", At(kEpoch)).status(),
            absl::InvalidArgumentError("receipt is empty"));
}

TEST(ReceiptTest, LongerThanTheBoundIsRefusedByItsLengthAlone) {
  const ReceiptSigner signer = Signer();
  const absl::Status too_long = absl::InvalidArgumentError("receipt is longer than 65536 bytes");
  EXPECT_EQ(signer.Verify(std::string(10 << 20, 'A'), At(kEpoch)).status(), too_long);
  // A validly signed token one byte over: "r1.", 65490 characters of base64 for 49117 bytes,
  // ".", 43 characters of signature.
  EXPECT_EQ(SignPayload(std::string(49117, 'x')).size(), kMaxReceiptBytes + 1);
  EXPECT_EQ(signer.Verify(SignPayload(std::string(49117, 'x')), At(kEpoch)).status(), too_long);
  EXPECT_EQ(signer.Verify(SignPayload(std::string(49116, 'x')), At(kEpoch)).status(),
            absl::InvalidArgumentError(kMalformed));
  // At the bound it is read (and found to be no receipt).
  EXPECT_EQ(signer.Verify(std::string(kMaxReceiptBytes, 'A'), At(kEpoch)).status(),
            absl::InvalidArgumentError(kMalformed));
}

TEST(ReceiptTest, MalformedShapesAreRefusedAsMalformed) {
  const ReceiptSigner signer = Signer();
  const std::string token = signer.Sign(Several());
  const std::string payload = token.substr(3, token.rfind('.') - 3);
  const std::string mac = token.substr(token.rfind('.') + 1);
  for (const std::string& bad : {
           "r2." + payload + "." + mac,                      // Another version.
           "R1." + payload + "." + mac,                      //
           payload + "." + mac,                              // No prefix.
           "r1." + payload + mac,                            // No separator.
           "r1." + payload + ".." + mac,                     // Three parts.
           "r1." + payload + "." + mac + "=",                // Padding.
           "r1." + payload + "=." + mac,                     //
           "r1." + payload + "." + mac + "AAAA",             // A longer signature.
           "r1." + payload + "." + mac.substr(0, 42) + "B",  // Bits past the last byte.
           "r1." + payload + " ." + mac,                     // Whitespace.
           "r1.." + mac,                                     // An empty payload, unsigned.
           std::string("r1.\0", 4) + "." + mac,              //
       }) {
    EXPECT_EQ(signer.Verify(bad, At(kEpoch)).status(), absl::InvalidArgumentError(kMalformed))
        << bad;
  }
}

// Payloads a valid signature covers but that lie: each is refused as malformed, and none
// reads outside its bytes or allocates what it claims (ASan and UBSan watch this test).
TEST(ReceiptTest, SignedPayloadsThatLieAboutTheirSizesAreRefused) {
  const ReceiptSigner signer = Signer();
  const ReceiptLimit l = Several().limits[0];
  const auto refused = [&](const Payload& p) {
    return signer.Verify(SignPayload(p.bytes()), At(kEpoch)).status() ==
           absl::InvalidArgumentError(kMalformed);
  };
  EXPECT_TRUE(refused(Payload()));                                              // Nothing.
  EXPECT_TRUE(refused(Payload().U32(0xffffffff).Str("id")));                    // The id's length.
  EXPECT_TRUE(refused(Payload().Header("id", kEpoch, kEpoch, 1, 0xffffffff)));  // The count.
  EXPECT_TRUE(refused(Payload().Header("id", kEpoch, kEpoch, 1, 257).LimitEntry(l)));
  EXPECT_TRUE(refused(Payload().Header("id", kEpoch, kEpoch, 1, 256).LimitEntry(l)));
  EXPECT_TRUE(refused(Payload().Header("id", kEpoch, kEpoch, 1, 2).LimitEntry(l)));
  EXPECT_TRUE(refused(Payload().Header("id", kEpoch, kEpoch, 1, 0).LimitEntry(l)));  // Trailing.
  EXPECT_TRUE(refused(Payload().Header("id", kEpoch, kEpoch, 1, 0).U8(0)));
  EXPECT_TRUE(refused(Payload().Header("id", kEpoch, kEpoch, -1, 0)));  // A negative cost.
  // A name longer than all that follows it.
  Payload rest;
  rest.U8(0).I64(10).I64(1'000'000).I64(10).I64(1).Str("k").I64(kEpoch).I64(1).I128(0).I64(0);
  Payload name_too_long = Payload().Header("id", kEpoch, kEpoch, 1, 1);
  name_too_long.U32(static_cast<uint32_t>(rest.bytes().size() + 1));
  std::string bytes = name_too_long.bytes() + rest.bytes();
  EXPECT_EQ(signer.Verify(SignPayload(bytes), At(kEpoch)).status(),
            absl::InvalidArgumentError(kMalformed));
  // And the same entry with the right length is read: the lies above are all that is wrong.
  Payload honest = Payload().Header("id", kEpoch, kEpoch, 1, 1).Str("");
  EXPECT_TRUE(signer.Verify(SignPayload(honest.bytes() + rest.bytes()), At(kEpoch)).ok());
}

TEST(ReceiptTest, SignedPayloadsWithImpossibleFiguresAreRefused) {
  const ReceiptSigner signer = Signer();
  const auto with_limit = [&](uint8_t algorithm, int64_t n, int64_t period, int64_t burst,
                              int64_t buckets, int64_t units = 1, int64_t max_debt = 0) {
    Payload p = Payload().Header("id", kEpoch, kEpoch, 1, 1).Str("name").U8(algorithm);
    p.I64(n).I64(period).I64(burst).I64(buckets).Str("key").I64(kEpoch).I64(units).I128(0);
    p.I64(max_debt);
    return signer.Verify(SignPayload(p.bytes()), At(kEpoch)).status();
  };
  const absl::Status malformed = absl::InvalidArgumentError(kMalformed);
  EXPECT_TRUE(with_limit(0, 10, 1'000'000, 10, 1).ok());
  EXPECT_EQ(with_limit(7, 10, 1'000'000, 10, 1), malformed);  // No eighth algorithm.
  EXPECT_EQ(with_limit(255, 10, 1'000'000, 10, 1), malformed);
  EXPECT_EQ(with_limit(0, 0, 1'000'000, 0, 1), malformed);  // Limit::Create refuses these.
  EXPECT_EQ(with_limit(0, 10, -1, 10, 1), malformed);
  EXPECT_EQ(with_limit(0, Limit::kMaxCount + 1, 1'000'000, Limit::kMaxCount + 1, 1), malformed);
  EXPECT_EQ(with_limit(3, 10, 1'000'000, 10, 7), malformed);  // 7 buckets do not divide 1s.
  EXPECT_EQ(with_limit(0, 10, 1'000'000, 20, 1), malformed);  // Ignored figures not as written.
  EXPECT_EQ(with_limit(0, 10, 1'000'000, 10, 60), malformed);
  EXPECT_EQ(with_limit(5, 10, 1'000'000, -1, 1), malformed);
  EXPECT_EQ(with_limit(0, 10, 1'000'000, 10, 1, -1), malformed);     // Negative units.
  EXPECT_EQ(with_limit(0, 10, 1'000'000, 10, 1, 1, -1), malformed);  // Negative debt.
  EXPECT_EQ(with_limit(0, 10, 1'000'000, 10, 1, 1, Limit::kMaxCount + 1), malformed);
}

TEST(ReceiptTest, EveryTruncatedPayloadSignedIsRefused) {
  const ReceiptSigner signer = Signer();
  const Receipt receipt = Several();
  const std::string payload = PayloadOf(signer.Sign(receipt));
  for (size_t n = 0; n < payload.size(); ++n) {
    ASSERT_EQ(signer.Verify(SignPayload(payload.substr(0, n)), receipt.issued).status(),
              absl::InvalidArgumentError(kMalformed))
        << "the first " << n << " bytes";
  }
  EXPECT_TRUE(signer.Verify(SignPayload(payload), receipt.issued).ok());
}

TEST(ReceiptTest, MoreLimitsThanTheBoundAreRefused) {
  const ReceiptSigner signer = Signer();
  Receipt receipt = Several();
  receipt.limits.assign(kMaxReceiptLimits, receipt.limits[0]);
  EXPECT_TRUE(signer.Verify(signer.Sign(receipt), receipt.issued).ok());
  receipt.limits.push_back(receipt.limits[0]);
  EXPECT_EQ(signer.Verify(signer.Sign(receipt), receipt.issued).status(),
            absl::InvalidArgumentError(kMalformed));
}

TEST(ReceiptTest, ValidUntilItsLastMicrosecond) {
  const ReceiptSigner signer = Signer();
  const Receipt receipt = Several();
  const std::string token = signer.Sign(receipt);
  EXPECT_TRUE(signer.Verify(token, receipt.expires).ok());
  EXPECT_TRUE(signer.Verify(token, receipt.issued - 1h).ok());  // A clock behind is no matter.
  EXPECT_EQ(signer.Verify(token, receipt.expires + 1us).status(),
            absl::InvalidArgumentError("receipt expired 1us ago"));
  EXPECT_EQ(signer.Verify(token, receipt.expires + 90s).status(),
            absl::InvalidArgumentError("receipt expired 90s ago"));
  // The farthest figures a signature may cover: no overflow in the message's arithmetic.
  Receipt ancient = receipt;
  ancient.expires = Timestamp(Micros(std::numeric_limits<int64_t>::min()));
  EXPECT_THAT(signer.Verify(signer.Sign(ancient), At(kEpoch)).status().message(),
              HasSubstr("receipt expired"));
}

TEST(ReceiptTest, CreateRefusesAShortSecret) {
  EXPECT_FALSE(ReceiptSigner::Create(kSecret.substr(0, kMinSecretBytes - 1)).ok());
  EXPECT_TRUE(ReceiptSigner::Create(kSecret.substr(0, kMinSecretBytes)).ok());
}

TEST(ReceiptTest, FromFileReadsTheSecretWithTrailingWhitespaceTrimmed) {
  ScratchDir dir;
  absl::StatusOr<ReceiptSigner> from_file =
      ReceiptSigner::FromFile(dir.Write("secret", kSecret + " \t\r\n\n"));
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  const Receipt receipt = Several();
  EXPECT_TRUE(Signer().Verify(from_file->Sign(receipt), receipt.issued).ok());
  // Leading whitespace is part of the secret: another secret.
  from_file = ReceiptSigner::FromFile(dir.Write("leading", " " + kSecret));
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_FALSE(Signer().Verify(from_file->Sign(receipt), receipt.issued).ok());
  // At the size bound.
  EXPECT_TRUE(ReceiptSigner::FromFile(dir.Write("big", std::string(4096, 's'))).ok());
}

TEST(ReceiptTest, FromFileRefusesBadFilesNamingThemAndNotTheSecret) {
  ScratchDir dir;
  const std::string missing = dir.Path("missing");
  const std::string short_secret = dir.Write("short", kSecret.substr(0, 31) + "\n   \n");
  const std::string too_big = dir.Write("too-big", std::string(4097, 's'));
  for (const std::string& path : {missing, short_secret, too_big, dir.path()}) {
    absl::StatusOr<ReceiptSigner> signer = ReceiptSigner::FromFile(path);
    ASSERT_FALSE(signer.ok()) << path;
    EXPECT_EQ(signer.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(signer.status().message(), HasSubstr("'" + path + "'"));
    EXPECT_THAT(signer.status().message(), ::testing::Not(HasSubstr("0123456789abcdef")));
  }
  EXPECT_THAT(ReceiptSigner::FromFile(short_secret).status().message(), HasSubstr("31 bytes"));
  EXPECT_THAT(ReceiptSigner::FromFile(too_big).status().message(), HasSubstr("4096 bytes"));
  EXPECT_THAT(ReceiptSigner::FromFile(missing).status().message(), HasSubstr("cannot be read"));
}

TEST(ReceiptTest, NewReceiptIdIs128RandomBitsInBase64Url) {
  const std::string a = NewReceiptId();
  const std::string b = NewReceiptId();
  EXPECT_EQ(a.size(), 22u);
  EXPECT_EQ(FromBase64Url(a).size(), 16u);
  EXPECT_EQ(a.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"),
            std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace sluice::server
