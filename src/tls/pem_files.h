#pragma once

// The TLS files sluice reads, each a PEM file: a certificate chain with its private key (what
// a side shows the other), and the CA certificates it verifies the other side with. Both of
// sluiced's TLS ends read them here, once, at start: the gRPC listener (server/grpc) and the
// Redis store's rediss:// connections (src/redis). Each file is read and checked with OpenSSL
// before anything is served, so that a missing file, one that holds no certificate, an
// encrypted key (nothing could type its passphrase) or a key that is not the certificate's is
// an error at start naming the file, and never a failed handshake later.
//
// Pure functions of the files: thread-safe.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace sluice::tls {

struct PemFiles {
  std::string cert_file;  // The certificate chain, leaf first; with key_file, or neither.
  std::string key_file;   // Its private key, unencrypted.
  std::string ca_file;    // CA certificates that verify the other side; may be empty.
};

// The files' contents, checked.
struct Pem {
  std::string cert_chain;
  std::string key;
  std::string ca;
};

// Reads and checks the files `files` names (those it names: an empty name is skipped).
// InvalidArgument whose message starts with `side` ("gRPC TLS", "Redis TLS"), names the file
// and says what is wrong with it.
absl::StatusOr<Pem> ReadPemFiles(const PemFiles& files, std::string_view side);

// Whether the certificate in `pem` (the first, the leaf of a chain) carries `name` among its
// subject alternative names: an IP address among its addresses, any other name among its DNS
// names (a wildcard there matches one label: *.example.com names a.example.com), as Go's
// x509 VerifyHostname decides. Its subject's common name is not looked at (nor by Go).
bool CertificateNames(std::string_view pem, std::string_view name);

}  // namespace sluice::tls
