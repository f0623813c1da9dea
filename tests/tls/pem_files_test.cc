// ReadPemFiles beyond what the gRPC listener's and the Redis store's tests show (a file
// missing, a key that is not the certificate's): a chain of two certificates, a file that
// holds something else after a certificate; and CertificateNames, as Go's VerifyHostname
// decides: addresses among the IP names, names among the DNS names, never the common name.

#include "src/tls/pem_files.h"

#include <fstream>
#include <string>

#include "fmt/format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/testing/tls.h"

namespace sluice::tls {
namespace {

using ::testing::HasSubstr;
using testing::TestCertificates;

class PemFilesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(certs_.ok()); }

  std::string Write(const std::string& name, const std::string& text) const {
    const std::string path = (certs_.dir() / name).string();
    std::ofstream(path) << text;
    return path;
  }

  TestCertificates certs_;
};

TEST_F(PemFilesTest, ReadsAChainLeafFirstAndSeveralCas) {
  const std::string chain = Write("chain.crt", TestCertificates::Read(certs_.Cert("server")) +
                                                   TestCertificates::Read(certs_.Cert("ca")));
  const std::string cas = Write("cas.crt", TestCertificates::Read(certs_.Cert("ca")) +
                                               TestCertificates::Read(certs_.Cert("other-ca")));
  absl::StatusOr<Pem> pem = ReadPemFiles(
      {.cert_file = chain, .key_file = certs_.Key("server"), .ca_file = cas}, "Test TLS");
  ASSERT_TRUE(pem.ok()) << pem.status();
  EXPECT_EQ(pem->cert_chain, TestCertificates::Read(chain));
  EXPECT_EQ(pem->key, TestCertificates::Read(certs_.Key("server")));
  EXPECT_EQ(pem->ca, TestCertificates::Read(cas));
  // The key is the leaf's: the CA first is another certificate's key.
  const std::string upside_down =
      Write("upside.crt", TestCertificates::Read(certs_.Cert("ca")) +
                              TestCertificates::Read(certs_.Cert("server")));
  pem = ReadPemFiles({.cert_file = upside_down, .key_file = certs_.Key("server")}, "Test TLS");
  EXPECT_THAT(pem.status().message(), HasSubstr("is not the key of the certificate"));
}

TEST_F(PemFilesTest, RefusesACertificateThatDoesNotParse) {
  const std::string text = TestCertificates::Read(certs_.Cert("ca"));
  // Its first line of base64 alone: a PEM block whose DER ends too soon.
  const size_t first = text.find('\n') + 1;
  const std::string broken =
      text.substr(0, text.find('\n', first) + 1) + "-----END CERTIFICATE-----\n";
  const std::string path = Write("broken.crt", text + broken);
  absl::StatusOr<Pem> pem = ReadPemFiles({.ca_file = path}, "Test TLS");
  EXPECT_TRUE(absl::IsInvalidArgument(pem.status())) << pem.status();
  EXPECT_THAT(pem.status().message(),
              HasSubstr(fmt::format("Test TLS CA file '{}': certificate 2 does not parse", path)));
  const std::string empty = Write("empty.crt", "");
  pem = ReadPemFiles({.ca_file = empty}, "Test TLS");
  EXPECT_THAT(pem.status().message(), HasSubstr("holds no PEM certificate"));
}

TEST_F(PemFilesTest, CertificateNamesAsGoVerifiesAHostname) {
  const std::string server = TestCertificates::Read(certs_.Cert("server"));
  for (const char* name : {"localhost", "LOCALHOST", "127.0.0.1", "::1", "0:0::1"}) {
    EXPECT_TRUE(CertificateNames(server, name)) << name;
  }
  for (const char* name : {"127.0.0.2", "localhost.", "host", "", "sluice-test-server"}) {
    EXPECT_FALSE(CertificateNames(server, name)) << name;
  }
  // The intruder's common name is client.sluice.test; its one SAN is intruder.sluice.test.
  const std::string intruder = TestCertificates::Read(certs_.Cert("intruder"));
  EXPECT_FALSE(CertificateNames(intruder, "client.sluice.test"));
  EXPECT_TRUE(CertificateNames(intruder, "intruder.sluice.test"));
  EXPECT_FALSE(CertificateNames("not a certificate", "localhost"));
}

}  // namespace
}  // namespace sluice::tls
