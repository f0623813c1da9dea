#pragma once

// CertificateWatch: the gRPC listener's TLS files watched while it serves, so that a
// certificate renewed in place (cert-manager, certbot) is served from the next handshake on
// without a restart, as envoyproxy/ratelimit's CertProvider serves it, and a broken one never.
//
// gRPC's own file watcher reads a key and a certificate file every so often and serves what it
// read, even a key that is not the certificate's (caught between the two files' renewals):
// then every handshake fails until the files agree again. So gRPC does not watch the
// operator's files: it watches a copy that only this class writes, one file holding the key
// and its chain together (read whole, never half of one pair and half of another), replaced
// by a rename and only by a pair that tls::ReadPemFiles accepted, the same check as at start.
// A change that does not pass is logged once, naming the file and the fault; the pair in use
// stays until the files are right.
//
// The copy lives in a directory of this process's own (mode 0700, in /dev/shm when it can: in
// memory, never on a disk), removed with the watch; one a killed process left behind is
// removed by the next start.
//
// Thread-safe: a thread of its own calls Check every reload_seconds; Check may also be called
// from any thread.

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "grpcpp/security/tls_certificate_provider.h"

#include "src/tls/pem_files.h"

namespace sluice::server {

class CertificateWatch {
 public:
  // What serves a pair that passed, for an engine that reads no files (the h2 engine: a new
  // OpenSSL context); an error keeps the pair in use, and is logged.
  using Serve = std::function<absl::Status(const tls::Pem& pem)>;

  // Reads and checks `files` (a certificate and its key; perhaps client CAs) and starts
  // watching them, looking every `reload_seconds` (0: 1). Each pair that passes, the first
  // included, goes to `serve` when given, else into the copy that provider() watches.
  // InvalidArgument as tls::ReadPemFiles; Internal when the copy cannot be written; `serve`'s
  // error for the first pair.
  static absl::StatusOr<std::unique_ptr<CertificateWatch>> Start(tls::PemFiles files,
                                                                 unsigned reload_seconds,
                                                                 Serve serve = nullptr);
  ~CertificateWatch();
  CertificateWatch(const CertificateWatch&) = delete;
  CertificateWatch& operator=(const CertificateWatch&) = delete;

  // What gRPC serves from: its file watcher over the copy (null with a Serve).
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider() const {
    return provider_;
  }

  // The copy's directory (for the tests: its mode, its removal); empty with a Serve.
  const std::string& dir() const { return dir_; }

  // Reads the operator's files again if any changed since the last look; when they pass,
  // replaces the copy. Returns whether the copy was replaced.
  bool Check();

 private:
  // What identifies a file's contents without reading them: a renewal changes one of these.
  struct Seen {
    dev_t device = 0;
    ino_t inode = 0;
    off_t size = -1;
    int64_t modified_ns = -1;
    bool operator==(const Seen&) const = default;
  };

  CertificateWatch(tls::PemFiles files, unsigned reload_seconds, std::string dir, Serve serve);
  static std::vector<Seen> Look(const tls::PemFiles& files);
  // Serves the files' checked contents: serve_, or the copy (internal::ReplaceFile).
  absl::Status Put(const tls::Pem& pem);
  void Run();

  const tls::PemFiles files_;
  const unsigned reload_seconds_;
  const std::string dir_;  // The copy's directory.
  const Serve serve_;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;

  std::mutex mutex_;
  std::vector<Seen> seen_;  // Guarded; the files as last read.
  bool stopping_ = false;   // Guarded.
  std::condition_variable wake_;
  std::thread thread_;
};

}  // namespace sluice::server
