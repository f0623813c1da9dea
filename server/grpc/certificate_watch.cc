#include "server/grpc/certificate_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "fmt/format.h"
#include "spdlog/spdlog.h"

#include "src/core/replace_file.h"
#include "src/core/status.h"
#include "src/tls/pem_files.h"

namespace sluice::server {
namespace {

constexpr char kIdentity[] = "identity.pem";  // The key, then its certificate chain.
constexpr char kCa[] = "client-ca.pem";

constexpr char kPrefix[] = "sluiced-tls-";

// Removes the copies that processes which ended without their destructor (killed, crashed)
// left in `parent`: directories named for a process id that no longer runs, of this user.
void RemoveLeftovers(const std::string& parent) {
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(parent, error)) {
    const std::string name = entry.path().filename().string();
    struct stat info {};
    if (!name.starts_with(kPrefix) || lstat(entry.path().c_str(), &info) != 0 ||
        !S_ISDIR(info.st_mode) || info.st_uid != geteuid()) {
      continue;
    }
    const long pid = std::strtol(name.c_str() + sizeof kPrefix - 1, nullptr, 10);
    if (pid > 0 && kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::filesystem::remove_all(entry.path(), error);
    }
  }
}

// A directory of this process's own for the copy: in /dev/shm (memory) when it can, named
// for the process (RemoveLeftovers).
absl::StatusOr<std::string> MakePrivateDir() {
  std::error_code ignored;
  std::string base = std::filesystem::is_directory("/dev/shm", ignored)
                         ? std::string("/dev/shm")
                         : std::filesystem::temp_directory_path(ignored).string();
  for (const std::string& parent : {base, std::string("/tmp")}) {
    RemoveLeftovers(parent);
    std::string name = fmt::format("{}/{}{}-XXXXXX", parent, kPrefix, getpid());
    if (mkdtemp(name.data()) != nullptr) {  // Mode 0700.
      return name;
    }
  }
  return absl::InternalError(
      fmt::format("gRPC TLS: cannot make a private directory for the certificates served: {}",
                  std::strerror(errno)));
}

// The key, then its chain, in one PEM text (OpenSSL finds each by its block's name).
std::string Identity(const tls::Pem& pem) {
  return pem.key + (pem.key.ends_with('\n') ? "" : "\n") + pem.cert_chain;
}

}  // namespace

absl::StatusOr<std::unique_ptr<CertificateWatch>> CertificateWatch::Start(tls::PemFiles files,
                                                                          unsigned reload_seconds,
                                                                          Serve serve) {
  // Looked at before they are read, as Check does: a renewal in between is seen next time.
  std::vector<Seen> seen = Look(files);
  absl::StatusOr<tls::Pem> pem = tls::ReadPemFiles(files, "gRPC TLS");
  if (!pem.ok()) {
    return pem.status();
  }
  std::string dir;
  if (serve == nullptr) {
    absl::StatusOr<std::string> made = MakePrivateDir();
    if (!made.ok()) {
      return made.status();
    }
    dir = *std::move(made);
  }
  std::unique_ptr<CertificateWatch> watch(
      new CertificateWatch(std::move(files), reload_seconds, std::move(dir), std::move(serve)));
  watch->seen_ = std::move(seen);
  if (absl::Status s = watch->Put(*pem); !s.ok()) {
    return absl::InternalError(
        fmt::format("gRPC TLS: the certificates served: {}", internal::Message(s)));
  }
  if (watch->serve_ == nullptr) {
    watch->provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        watch->dir_ + "/" + kIdentity, watch->dir_ + "/" + kIdentity,
        watch->files_.ca_file.empty() ? std::string() : watch->dir_ + "/" + kCa,
        watch->reload_seconds_);
  }
  watch->thread_ = std::thread([w = watch.get()] { w->Run(); });
  return watch;
}

CertificateWatch::CertificateWatch(tls::PemFiles files, unsigned reload_seconds, std::string dir,
                                   Serve serve)
    : files_(std::move(files)),
      reload_seconds_(reload_seconds == 0 ? 1 : reload_seconds),
      dir_(std::move(dir)),
      serve_(std::move(serve)) {}

CertificateWatch::~CertificateWatch() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) {
    thread_.join();
  }
  provider_.reset();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::vector<CertificateWatch::Seen> CertificateWatch::Look(const tls::PemFiles& files) {
  std::vector<Seen> seen;
  for (const std::string* file : {&files.cert_file, &files.key_file, &files.ca_file}) {
    struct stat st {};
    Seen one;
    if (!file->empty() && stat(file->c_str(), &st) == 0) {
      one = {.device = st.st_dev,
             .inode = st.st_ino,
             .size = st.st_size,
             .modified_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
    }
    seen.push_back(one);
  }
  return seen;
}

absl::Status CertificateWatch::Put(const tls::Pem& pem) {
  if (serve_ != nullptr) {
    return serve_(pem);
  }
  if (!files_.ca_file.empty()) {
    if (absl::Status s = internal::ReplaceFile(dir_ + "/" + kCa, pem.ca, 0600); !s.ok()) {
      return s;
    }
  }
  return internal::ReplaceFile(dir_ + "/" + kIdentity, Identity(pem), 0600);
}

bool CertificateWatch::Check() {
  std::lock_guard lock(mutex_);
  std::vector<Seen> now = Look(files_);
  if (now == seen_) {
    return false;
  }
  seen_ = std::move(now);  // Whatever the outcome: one log line per change.
  absl::StatusOr<tls::Pem> pem = tls::ReadPemFiles(files_, "gRPC TLS");
  if (!pem.ok()) {
    spdlog::error("{}; the certificate in use is kept until the files are right",
                  std::string(pem.status().message()));
    return false;
  }
  if (absl::Status s = Put(*pem); !s.ok()) {
    spdlog::error("gRPC TLS: the renewed certificates: {}; the certificate in use is kept",
                  internal::Message(s));
    return false;
  }
  spdlog::info("gRPC TLS: the certificate in {} is served from the next handshake on",
               files_.cert_file);
  return true;
}

void CertificateWatch::Run() {
  const auto interval = std::chrono::seconds(reload_seconds_);
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
    lock.unlock();
    Check();
    lock.lock();
  }
}

}  // namespace sluice::server
