#include "server/service/secret_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "fmt/format.h"

namespace sluice::server {
namespace {

absl::Status CannotRead(std::string_view what, const std::string& path) {
  return absl::InvalidArgumentError(
      fmt::format("{} '{}' cannot be read: {}", what, path, std::strerror(errno)));
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(std::string_view what, const std::string& path) {
  // POSIX reads rather than a stream: a directory or an I/O error then fails with its errno
  // instead of reading as an empty file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return CannotRead(what, path);
  }
  // One byte more than the bound, so that a longer file is told from one exactly at it
  // without reading all of what may be a huge file.
  std::array<char, kMaxSecretFileBytes + 1> buffer;
  size_t size = 0;
  while (size < buffer.size()) {
    const ssize_t n = ::read(fd, buffer.data() + size, buffer.size() - size);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      absl::Status error = CannotRead(what, path);
      ::close(fd);
      return error;
    }
    if (n == 0) {
      break;
    }
    size += static_cast<size_t>(n);
  }
  ::close(fd);
  if (size > kMaxSecretFileBytes) {
    return absl::InvalidArgumentError(fmt::format("{} '{}' is longer than {} bytes: not a secret",
                                                  what, path, kMaxSecretFileBytes));
  }
  constexpr std::string_view kWhitespace = " \t\r\n\v\f";
  while (size > 0 && kWhitespace.find(buffer[size - 1]) != std::string_view::npos) {
    --size;
  }
  return std::string(buffer.data(), size);
}

}  // namespace sluice::server
