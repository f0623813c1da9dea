// CertificateWatch::Check on its own, without its thread's timing: a look at unchanged files
// replaces nothing; a renewed pair is taken once; a broken or mismatched one never, and the
// pair that follows it is taken.

#include "server/grpc/certificate_watch.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gtest/gtest.h"

#include "tests/testing/tls.h"

namespace sluice::server {
namespace {

class CertificateWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok());
    Install("server");
  }

  // `name`'s certificate and key as the watched files, each replaced by a rename.
  void Install(const std::string& name) {
    Write(cert_, testing::TestCertificates::Read(certs_.Cert(name)));
    Write(key_, testing::TestCertificates::Read(certs_.Key(name)));
  }
  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path + ".new") << text;
    std::filesystem::rename(path + ".new", path);
  }

  testing::TestCertificates certs_;
  const std::string cert_ = (certs_.dir() / "live.crt").string();
  const std::string key_ = (certs_.dir() / "live.key").string();
};

TEST_F(CertificateWatchTest, TakesARenewedPairOnceAndABrokenOneNever) {
  // A look an hour apart: only the test's calls to Check look.
  absl::StatusOr<std::unique_ptr<CertificateWatch>> watch =
      CertificateWatch::Start({.cert_file = cert_, .key_file = key_}, 3600);
  ASSERT_TRUE(watch.ok()) << watch.status();
  EXPECT_NE((*watch)->provider(), nullptr);
  EXPECT_FALSE((*watch)->Check());  // Nothing changed.

  Install("elsewhere");
  EXPECT_TRUE((*watch)->Check());
  EXPECT_FALSE((*watch)->Check());  // Taken once.

  // The key of another certificate: refused (logged), and not looked at again until a change.
  Write(key_, testing::TestCertificates::Read(certs_.Key("server")));
  EXPECT_FALSE((*watch)->Check());
  EXPECT_FALSE((*watch)->Check());
  Write(cert_, "not a certificate\n");
  EXPECT_FALSE((*watch)->Check());

  Install("server");  // Right again.
  EXPECT_TRUE((*watch)->Check());
}

// The copy gRPC reads: the key and its chain, readable by this user alone, replaced only by a
// pair that passed, and gone with the watch; a copy a killed process left is removed.
TEST_F(CertificateWatchTest, TheCopyIsPrivateCheckedAndRemoved) {
  const std::filesystem::path left = "/dev/shm/sluiced-tls-999999999-x";  // Above pid_max.
  std::error_code ignored;
  std::filesystem::create_directories(left, ignored);
  absl::StatusOr<std::unique_ptr<CertificateWatch>> watch =
      CertificateWatch::Start({.cert_file = cert_, .key_file = key_}, 3600);
  ASSERT_TRUE(watch.ok()) << watch.status();
  const std::string dir = (*watch)->dir();
  if (std::filesystem::is_directory("/dev/shm")) {
    EXPECT_EQ(dir.rfind("/dev/shm/sluiced-tls-", 0), 0U) << dir;
    EXPECT_FALSE(std::filesystem::exists(left)) << "a dead process's copy stayed";
  }
  namespace fs = std::filesystem;
  EXPECT_EQ(fs::status(dir).permissions() & fs::perms::all, fs::perms::owner_all);
  const std::string identity = dir + "/identity.pem";
  EXPECT_EQ(fs::status(identity).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  const std::string served = testing::TestCertificates::Read(identity);
  EXPECT_NE(served.find(testing::TestCertificates::Read(certs_.Cert("server"))), std::string::npos);
  EXPECT_NE(served.find("PRIVATE KEY"), std::string::npos);

  Write(key_, testing::TestCertificates::Read(certs_.Key("client")));  // Not the cert's key.
  EXPECT_FALSE((*watch)->Check());
  EXPECT_EQ(testing::TestCertificates::Read(identity), served);

  watch->reset();
  EXPECT_FALSE(fs::exists(dir));
}

TEST_F(CertificateWatchTest, AWrongFileAtStartIsRefusedNamingIt) {
  Write(key_, testing::TestCertificates::Read(certs_.Key("client")));
  absl::StatusOr<std::unique_ptr<CertificateWatch>> watch =
      CertificateWatch::Start({.cert_file = cert_, .key_file = key_}, 1);
  EXPECT_TRUE(absl::IsInvalidArgument(watch.status()));
  EXPECT_NE(watch.status().message().find(key_), std::string_view::npos) << watch.status();
}

}  // namespace
}  // namespace sluice::server
