#include "server/http/response.h"

#include <stdexcept>

#include "boost/beast/core/string.hpp"
#include "fmt/compile.h"
#include "fmt/format.h"

namespace sluice::server {
namespace {

// Whether `text` holds CR or LF. (Two memchr calls, not find_first_of, which calls memchr once
// for each character of `text`: this runs for every header of every answer.)
bool HasLineBreak(std::string_view text) {
  return text.find('\r') != std::string_view::npos || text.find('\n') != std::string_view::npos;
}

// `n` in decimal, written into `digits` (on the caller's stack: fmt writing through a
// std::string's back_inserter grows the string piece by piece).
std::string_view Decimal(size_t n, char (&digits)[20]) {
  const char* end = fmt::format_to(digits, FMT_COMPILE("{}"), n);
  return {digits, static_cast<size_t>(end - digits)};
}

}  // namespace

size_t HttpResponse::Find(std::string_view name) const {
  for (size_t i = 0; i < lines_.size(); ++i) {
    if (lines_[i].name_size == name.size() &&
        boost::beast::iequals(std::string_view(headers_).substr(lines_[i].at, name.size()), name)) {
      return i;
    }
  }
  return lines_.size();
}

std::pair<size_t, size_t> HttpResponse::ValueOf(size_t i) const {
  const size_t next = i + 1 < lines_.size() ? lines_[i + 1].at : headers_.size();
  return {lines_[i].at + lines_[i].name_size + 2, next - 2};  // Between "Name: " and "\r\n".
}

void HttpResponse::set(std::string_view name, std::string_view value) {
  if (name.empty() || name.find(':') != std::string_view::npos || HasLineBreak(name) ||
      HasLineBreak(value)) {
    throw std::invalid_argument(fmt::format("header '{}' would not be one line", name));
  }
  const size_t i = Find(name);
  if (i == lines_.size()) {
    if (headers_.empty()) {
      headers_.reserve(256);  // Room for the usual headers: one allocation, not several.
    }
    lines_.push_back(Line{.at = static_cast<uint32_t>(headers_.size()),
                          .name_size = static_cast<uint32_t>(name.size())});
    headers_.append(name).append(": ").append(value).append("\r\n");
    return;
  }
  const auto [start, end] = ValueOf(i);
  headers_.replace(start, end - start, value);
  // The lines after it move by the difference (unsigned arithmetic wraps as a negative would).
  const auto moved = static_cast<uint32_t>(value.size() - (end - start));
  for (size_t later = i + 1; later < lines_.size(); ++later) {
    lines_[later].at += moved;
  }
}

std::string_view HttpResponse::operator[](std::string_view name) const {
  const size_t i = Find(name);
  if (i == lines_.size()) {
    return {};
  }
  const auto [start, end] = ValueOf(i);
  return std::string_view(headers_).substr(start, end - start);
}

bool HttpResponse::has(std::string_view name) const { return Find(name) != lines_.size(); }

void HttpResponse::prepare_payload() {
  char digits[20];
  set(Field::content_length, Decimal(body_.size(), digits));
}

void HttpResponse::AppendTo(std::string& out) const {
  out += version_ == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  char digits[20];
  out += Decimal(static_cast<unsigned>(status_), digits);
  out += ' ';
  out += std::string_view(boost::beast::http::obsolete_reason(status_));
  out += "\r\n";
  out += headers_;
  if (version_ == 10 && keep_alive_) {
    out += "Connection: keep-alive\r\n";
  } else if (version_ != 10 && !keep_alive_) {
    out += "Connection: close\r\n";
  }
  out += "\r\n";
  out += body_;
}

}  // namespace sluice::server
