#include "src/core/replace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "fmt/format.h"

namespace sluice::internal {
namespace {

absl::Status Errno(std::string_view what, const std::string& path) {
  return absl::UnavailableError(
      fmt::format("{} {}: {}", what, path, std::generic_category().message(errno)));
}

}  // namespace

absl::Status ReplaceFile(const std::string& path, std::string_view contents, mode_t mode) {
  std::string temp = path + ".XXXXXX";
  const int fd = ::mkstemp(temp.data());  // Mode 0600 until fchmod, whatever the umask.
  if (fd < 0) {
    return Errno("cannot create a temporary file beside", path);
  }
  auto fail = [&](std::string_view what, const std::string& name) {
    absl::Status s = Errno(what, name);
    ::close(fd);
    ::unlink(temp.c_str());
    return s;
  };
  while (!contents.empty()) {
    const ssize_t n = ::write(fd, contents.data(), contents.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return fail("cannot write", temp);
    }
    contents.remove_prefix(static_cast<size_t>(n));
  }
  if (::fchmod(fd, mode) != 0 || ::fsync(fd) != 0) {
    return fail("cannot fsync", temp);
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    absl::Status s = Errno("cannot rename to", path);
    ::unlink(temp.c_str());
    return s;
  }
  // The rename is durable only once the directory that records it is on disk too.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash == 0 ? 1 : slash);
  if (const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return absl::OkStatus();
}

}  // namespace sluice::internal
