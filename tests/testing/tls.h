#pragma once

// A test's own certificates, made when the test runs by the openssl command (Debian's openssl
// package) in a temporary directory of their own: a CA; a server certificate it signed for
// localhost, 127.0.0.1 and ::1; a client certificate it signed (client.sluice.test); and, to
// be refused, a second CA with a client certificate of its own, a client certificate of the
// first CA for another name (intruder.sluice.test, though its subject's common name is
// client.sluice.test), and a server certificate of the first CA for another host. EC P-256
// keys, unencrypted, valid for two days.

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace sluice::testing {

class TestCertificates {
 public:
  TestCertificates() {
    dir_ = std::filesystem::temp_directory_path() /
           ("sluice-tls-" + std::to_string(getpid()) + "-" + std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
    ok_ = MakeCa("ca") && MakeCa("other-ca") &&
          Sign("server", "ca", "localhost",
               "subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n"
               // Redis also shows its server certificate as a client (a cluster's bus).
               "extendedKeyUsage=serverAuth,clientAuth\n") &&
          Sign("client", "ca", "sluice-test-client",
               "subjectAltName=DNS:client.sluice.test\nextendedKeyUsage=clientAuth\n") &&
          Sign("intruder", "ca", "client.sluice.test",
               "subjectAltName=DNS:intruder.sluice.test\nextendedKeyUsage=clientAuth\n") &&
          Sign("other-client", "other-ca", "sluice-test-client", "extendedKeyUsage=clientAuth\n") &&
          Sign("elsewhere", "ca", "elsewhere.example",
               "subjectAltName=DNS:elsewhere.example\nextendedKeyUsage=serverAuth\n");
    if (!ok_) {
      ADD_FAILURE() << "openssl could not make the test's certificates in " << dir_
                    << " (see openssl.log there)";
    }
  }
  ~TestCertificates() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  TestCertificates(const TestCertificates&) = delete;
  TestCertificates& operator=(const TestCertificates&) = delete;

  bool ok() const { return ok_; }
  const std::filesystem::path& dir() const { return dir_; }

  // Files: `name` is ca, other-ca, server, client, intruder, other-client or elsewhere.
  std::string Cert(const std::string& name) const { return (dir_ / (name + ".crt")).string(); }
  std::string Key(const std::string& name) const { return (dir_ / (name + ".key")).string(); }

  // A file's contents (gRPC's client credentials take PEM text).
  static std::string Read(const std::string& path) {
    std::ostringstream text;
    text << std::ifstream(path).rdbuf();
    return text.str();
  }

 private:
  bool Run(const std::string& command) const {
    const std::string line =
        "cd '" + dir_.string() + "' && " + command + " >>openssl.log 2>&1 </dev/null";
    return std::system(line.c_str()) == 0;
  }

  bool MakeCa(const std::string& name) const {
    return Run(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 "
        "-keyout " +
        name + ".key -out " + name + ".crt -subj /CN=sluice-test-" + name +
        " -addext basicConstraints=critical,CA:TRUE"
        " -addext keyUsage=critical,keyCertSign,cRLSign");
  }

  bool Sign(const std::string& name, const std::string& ca, const std::string& cn,
            const std::string& extensions) const {
    std::ofstream(dir_ / (name + ".ext")) << extensions;
    return Run("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout " +
               name + ".key -out " + name + ".csr -subj /CN=" + cn) &&
           Run("openssl x509 -req -in " + name + ".csr -CA " + ca + ".crt -CAkey " + ca +
               ".key -CAcreateserial -CAserial " + ca + ".srl -days 2 -extfile " + name +
               ".ext -out " + name + ".crt");
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  bool ok_ = false;
};

}  // namespace sluice::testing
