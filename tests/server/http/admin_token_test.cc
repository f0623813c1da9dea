// AdminToken (server/http/admin_token.h): an Authorization header judged against the token of
// --admin-token-file, as RFC 6750 writes bearer credentials, and the file's checks.

#include "server/http/admin_token.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/scratch_dir.h"

namespace sluice::server {
namespace {

using sluice::testing::ScratchDir;
using ::testing::HasSubstr;
using Verdict = AdminToken::Verdict;

const std::string kToken = "s3cr3t-T0ken_0123456789";

AdminToken Token() {
  absl::StatusOr<AdminToken> token = AdminToken::Create(kToken);
  EXPECT_TRUE(token.ok()) << token.status();
  return *std::move(token);
}

TEST(AdminTokenTest, NoBearerCredentialIsMissing) {
  const AdminToken token = Token();
  EXPECT_EQ(token.Judge(""), Verdict::kMissing);
  EXPECT_EQ(token.Judge("Bearer"), Verdict::kMissing);
  EXPECT_EQ(token.Judge("Bearer "), Verdict::kMissing);
  EXPECT_EQ(token.Judge("Bearer    "), Verdict::kMissing);
  EXPECT_EQ(token.Judge("Basic " + kToken), Verdict::kMissing);
  EXPECT_EQ(token.Judge("Bearer" + kToken), Verdict::kMissing);    // No space.
  EXPECT_EQ(token.Judge("Bearer\t" + kToken), Verdict::kMissing);  // Not SP.
  EXPECT_EQ(token.Judge(" Bearer " + kToken), Verdict::kMissing);
  EXPECT_EQ(token.Judge("Bearerx " + kToken), Verdict::kMissing);
  EXPECT_EQ(token.Judge(kToken), Verdict::kMissing);
}

TEST(AdminTokenTest, TheRightTokenIsGrantedWhateverTheSchemesCase) {
  const AdminToken token = Token();
  EXPECT_EQ(token.Judge("Bearer " + kToken), Verdict::kGranted);
  EXPECT_EQ(token.Judge("bearer " + kToken), Verdict::kGranted);
  EXPECT_EQ(token.Judge("BEARER " + kToken), Verdict::kGranted);
  EXPECT_EQ(token.Judge("bEaReR " + kToken), Verdict::kGranted);
  EXPECT_EQ(token.Judge("Bearer   " + kToken), Verdict::kGranted);  // 1*SP.
}

TEST(AdminTokenTest, AnyOtherTokenIsWrong) {
  const AdminToken token = Token();
  EXPECT_EQ(token.Judge("Bearer wrong-token-0123456789"), Verdict::kWrong);
  EXPECT_EQ(token.Judge("Bearer x"), Verdict::kWrong);
  EXPECT_EQ(token.Judge("Bearer " + kToken.substr(0, kToken.size() - 1)), Verdict::kWrong);
  EXPECT_EQ(token.Judge("Bearer " + kToken.substr(1)), Verdict::kWrong);
  EXPECT_EQ(token.Judge("Bearer " + kToken + "x"), Verdict::kWrong);
  EXPECT_EQ(token.Judge("Bearer " + kToken + " "), Verdict::kWrong);
  EXPECT_EQ(token.Judge("Bearer " + kToken + " " + kToken), Verdict::kWrong);
  std::string upper = kToken;
  upper[0] = 'S';
  EXPECT_EQ(token.Judge("Bearer " + upper), Verdict::kWrong);  // The token's case counts.
  for (size_t i = 0; i < kToken.size(); ++i) {
    std::string changed = kToken;
    changed[i] ^= 1;
    EXPECT_EQ(token.Judge("Bearer " + changed), Verdict::kWrong) << i;
  }
}

TEST(AdminTokenTest, CreateRefusesShortOrUnprintableTokens) {
  EXPECT_FALSE(AdminToken::Create(std::string(kMinAdminTokenBytes - 1, 'a')).ok());
  EXPECT_TRUE(AdminToken::Create(std::string(kMinAdminTokenBytes, 'a')).ok());
  for (const std::string& bad : {kToken + " x", kToken + "\t", kToken + "\n", "\x7f" + kToken,
                                 kToken + "\xc3\xa9", std::string(20, '\0')}) {
    absl::StatusOr<AdminToken> token = AdminToken::Create(bad);
    ASSERT_FALSE(token.ok()) << bad;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(AdminTokenTest, FromFileTrimsTrailingWhitespace) {
  ScratchDir dir;
  absl::StatusOr<AdminToken> token = AdminToken::FromFile(dir.Write("token", kToken + "\n \t\r\n"));
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->Judge("Bearer " + kToken), Verdict::kGranted);
  EXPECT_EQ(token->Judge("Bearer " + kToken + "\n"), Verdict::kWrong);
  EXPECT_TRUE(AdminToken::FromFile(dir.Write("big", std::string(4096, 't'))).ok());
}

TEST(AdminTokenTest, FromFileRefusesBadFilesNamingThemAndNotTheToken) {
  ScratchDir dir;
  const std::string missing = dir.Path("missing");
  const std::string short_token = dir.Write("short", "abcdefghijklmno\n");  // 15 bytes.
  const std::string spaced = dir.Write("spaced", "abcdefgh ijklmnopq");
  const std::string control = dir.Write("control", "abcdefgh\x01ijklmnopq\n");
  const std::string leading = dir.Write("leading", "\nabcdefghijklmnopq");
  const std::string too_big = dir.Write("too-big", std::string(4097, 't'));
  const std::string empty = dir.Write("empty", "");
  for (const std::string& path :
       {missing, short_token, spaced, control, leading, too_big, empty, dir.path()}) {
    absl::StatusOr<AdminToken> token = AdminToken::FromFile(path);
    ASSERT_FALSE(token.ok()) << path;
    EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(token.status().message(), HasSubstr("'" + path + "'"));
    EXPECT_THAT(token.status().message(), ::testing::Not(HasSubstr("abcdefgh")));
  }
  EXPECT_THAT(AdminToken::FromFile(short_token).status().message(), HasSubstr("15 bytes"));
  EXPECT_THAT(AdminToken::FromFile(too_big).status().message(), HasSubstr("4096 bytes"));
  EXPECT_THAT(AdminToken::FromFile(missing).status().message(), HasSubstr("cannot be read"));
}

// The operator's page's browser credential: Basic, any user, the token as the password; taken
// only where asked for (Schemes::kBearerOrBasic), never by the endpoints that take Bearer.
TEST(AdminTokenTest, BasicCredentialOnlyWhereAskedFor) {
  const AdminToken token = Token();
  const auto basic = [](const std::string& user_password) {
    std::string encoded;
    absl::Base64Escape(user_password, &encoded);
    return "Basic " + encoded;
  };
  constexpr auto kBoth = AdminToken::Schemes::kBearerOrBasic;
  EXPECT_EQ(token.Judge(basic("operator:" + kToken), kBoth), Verdict::kGranted);
  EXPECT_EQ(token.Judge(basic(":" + kToken), kBoth), Verdict::kGranted);
  EXPECT_EQ(token.Judge("basic   " + basic("x:" + kToken).substr(6), kBoth), Verdict::kGranted);
  EXPECT_EQ(token.Judge("Bearer " + kToken, kBoth), Verdict::kGranted);
  // Not where Bearer alone is taken.
  EXPECT_EQ(token.Judge(basic("operator:" + kToken)), Verdict::kMissing);
  // A wrong password, or the token as the user name, is wrong or no credential.
  EXPECT_EQ(token.Judge(basic("operator:" + kToken + "x"), kBoth), Verdict::kWrong);
  EXPECT_EQ(token.Judge(basic(kToken + ":"), kBoth), Verdict::kMissing);
  EXPECT_EQ(token.Judge(basic(kToken), kBoth), Verdict::kMissing);  // No colon.
  EXPECT_EQ(token.Judge("Basic !!!not-base64", kBoth), Verdict::kMissing);
  EXPECT_EQ(token.Judge("Basic ", kBoth), Verdict::kMissing);
}

}  // namespace
}  // namespace sluice::server
