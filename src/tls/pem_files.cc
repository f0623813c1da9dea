#include "src/tls/pem_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <vector>

#include "fmt/format.h"
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

namespace sluice::tls {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Certificate = std::unique_ptr<X509, X509Free>;
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;

// A file's role in messages.
struct File {
  std::string_view side;  // "gRPC TLS"
  std::string_view role;  // "certificate"
  const std::string& path;

  absl::Status Error(std::string_view why) const {
    return absl::InvalidArgumentError(fmt::format("{} {} file '{}': {}", side, role, path, why));
  }
};

// OpenSSL's reason for the last failure on this thread, and an empty queue after it (the
// queue is per thread: a stale entry would be blamed on the next call).
std::string OpenSslReason() {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  if (code == 0) {
    return "no PEM data";
  }
  const char* reason = ERR_reason_error_string(code);
  return reason != nullptr ? reason : fmt::format("OpenSSL error {:#x}", code);
}

absl::StatusOr<std::string> Read(const File& file) {
  std::ifstream in(file.path, std::ios::binary);
  if (!in) {
    return file.Error(fmt::format("cannot read it: {}", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return file.Error(fmt::format("reading it failed: {}", std::strerror(errno)));
  }
  return text.str();
}

std::unique_ptr<BIO, BioFree> Memory(const std::string& text) {
  return std::unique_ptr<BIO, BioFree>(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Every certificate in `text`, in order; an error if there is none or one does not parse.
absl::StatusOr<std::vector<Certificate>> Certificates(const File& file, const std::string& text) {
  std::vector<Certificate> certificates;
  auto bio = Memory(text);
  ERR_clear_error();
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certificates.emplace_back(x);
  }
  // The loop ends at the end of the text ("no start line") or at something that is not a
  // certificate; only the first is expected.
  const unsigned long last = ERR_peek_last_error();
  if (ERR_GET_LIB(last) == ERR_LIB_PEM && ERR_GET_REASON(last) == PEM_R_NO_START_LINE &&
      !certificates.empty()) {
    ERR_clear_error();
    return certificates;
  }
  if (certificates.empty() && ERR_GET_REASON(last) == PEM_R_NO_START_LINE) {
    ERR_clear_error();
    return file.Error("holds no PEM certificate ('-----BEGIN CERTIFICATE-----')");
  }
  return file.Error(
      fmt::format("certificate {} does not parse: {}", certificates.size() + 1, OpenSslReason()));
}

// A passphrase callback that has none to give: an encrypted key fails instead of prompting
// on the terminal (OpenSSL's default), which a server may not have.
int NoPassphrase(char*, int, int, void*) { return -1; }

absl::StatusOr<Key> PrivateKey(const File& file, const std::string& text) {
  auto bio = Memory(text);
  ERR_clear_error();
  Key key(PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    const bool encrypted = text.find("ENCRYPTED") != std::string::npos;
    const std::string reason = OpenSslReason();
    return file.Error(encrypted ? "the key is encrypted; give it without a passphrase"
                                : fmt::format("holds no PEM private key: {}", reason));
  }
  return key;
}

}  // namespace

absl::StatusOr<Pem> ReadPemFiles(const PemFiles& files, std::string_view side) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(fmt::format(
        "{}: a certificate needs its key and a key its certificate: give both or neither (the "
        "{} file is missing)",
        side, files.cert_file.empty() ? "certificate" : "key"));
  }
  Pem pem;
  if (!files.cert_file.empty()) {
    const File cert{side, "certificate", files.cert_file};
    const File key{side, "key", files.key_file};
    absl::StatusOr<std::string> cert_text = Read(cert);
    if (!cert_text.ok()) {
      return cert_text.status();
    }
    absl::StatusOr<std::string> key_text = Read(key);
    if (!key_text.ok()) {
      return key_text.status();
    }
    absl::StatusOr<std::vector<Certificate>> chain = Certificates(cert, *cert_text);
    if (!chain.ok()) {
      return chain.status();
    }
    absl::StatusOr<Key> private_key = PrivateKey(key, *key_text);
    if (!private_key.ok()) {
      return private_key.status();
    }
    if (X509_check_private_key(chain->front().get(), private_key->get()) != 1) {
      ERR_clear_error();
      return key.Error(fmt::format("is not the key of the certificate in '{}'", files.cert_file));
    }
    pem.cert_chain = *std::move(cert_text);
    pem.key = *std::move(key_text);
  }
  if (!files.ca_file.empty()) {
    const File ca{side, "CA", files.ca_file};
    absl::StatusOr<std::string> ca_text = Read(ca);
    if (!ca_text.ok()) {
      return ca_text.status();
    }
    if (absl::StatusOr<std::vector<Certificate>> cas = Certificates(ca, *ca_text); !cas.ok()) {
      return cas.status();
    }
    pem.ca = *std::move(ca_text);
  }
  return pem;
}

bool CertificateNames(std::string_view pem, std::string_view name) {
  std::unique_ptr<BIO, BioFree> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  const Certificate certificate(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
  bool names = false;
  if (certificate != nullptr) {
    const std::string text(name);
    int match = X509_check_ip_asc(certificate.get(), text.c_str(), 0);
    if (match == -2) {  // Not an address: a DNS name.
      match = X509_check_host(certificate.get(), text.data(), text.size(),
                              X509_CHECK_FLAG_NEVER_CHECK_SUBJECT, nullptr);
    }
    names = match == 1;
  }
  ERR_clear_error();
  return names;
}

}  // namespace sluice::tls
