#include "tools/check.h"

#include <iostream>
#include <string>
#include <utility>

#include "boost/asio/connect.hpp"
#include "boost/asio/ip/tcp.hpp"
#include "boost/beast/core.hpp"
#include "boost/beast/http.hpp"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

#include "sluice/duration.h"
#include "tools/trace.h"

namespace sluice::tools {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

struct Url {
  std::string host;
  std::string port;
  std::string target;
};

// "http://HOST[:PORT][/TARGET]"; errors say what is wrong, the caller names the flag.
absl::StatusOr<Url> ParseUrl(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  if (!url.starts_with(kScheme)) {
    return absl::InvalidArgumentError("expected http://HOST:PORT");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  const std::string_view authority = rest.substr(0, slash);
  Url parsed{.target = slash == std::string_view::npos ? "" : std::string(rest.substr(slash))};
  const size_t colon = authority.rfind(':');
  if (colon == std::string_view::npos || authority.ends_with(']')) {
    parsed.host = std::string(authority);
    parsed.port = "80";
  } else {
    parsed.host = std::string(authority.substr(0, colon));
    parsed.port = std::string(authority.substr(colon + 1));
  }
  if (parsed.host.size() >= 2 && parsed.host.front() == '[') {
    parsed.host = parsed.host.substr(1, parsed.host.size() - 2);
  }
  if (parsed.host.empty()) {
    return absl::InvalidArgumentError("no host");
  }
  if (parsed.port.empty() || parsed.port.size() > 5 ||
      parsed.port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(parsed.port) > 65535) {
    return absl::InvalidArgumentError(fmt::format("'{}' is not a port number", parsed.port));
  }
  return parsed;
}

// The keys of a request (rules mode or ad hoc), as CheckBody and ResetBody send them.
absl::StatusOr<nlohmann::ordered_json> KeysBody(const CheckFlags& flags) {
  nlohmann::ordered_json body;
  if (flags.domain.empty() == flags.key.empty()) {
    return absl::InvalidArgumentError(
        "give either --domain and --descriptor (rules mode) or --key with --limit and --period "
        "(ad hoc)");
  }
  if (!flags.key.empty()) {
    if (!flags.limit || flags.period.empty()) {
      return absl::InvalidArgumentError("--key needs --limit and --period");
    }
    body["key"] = flags.key;
    if (!flags.algorithm.empty()) {
      body["algorithm"] = flags.algorithm;
    }
    body["limit"] = *flags.limit;
    body["period"] = flags.period;
    if (flags.burst) {
      body["burst"] = *flags.burst;
    }
    if (flags.buckets) {
      body["buckets"] = *flags.buckets;
    }
    if (flags.calendar) {
      body["calendar"] = true;
    }
    if (!flags.time_zone.empty()) {
      body["time_zone"] = flags.time_zone;
    }
    if (flags.feedback) {
      body["feedback"] = true;
    }
  } else {
    if (flags.descriptors.empty()) {
      return absl::InvalidArgumentError("--domain needs at least one --descriptor k=v");
    }
    body["domain"] = flags.domain;
    nlohmann::ordered_json descriptors = nlohmann::ordered_json::array();
    for (const std::string& descriptor : flags.descriptors) {
      nlohmann::ordered_json entries = nlohmann::ordered_json::array();
      for (std::string_view entry : SplitCommas(descriptor)) {
        const size_t equals = entry.find('=');
        if (equals == std::string_view::npos || equals == 0) {
          return absl::InvalidArgumentError(
              fmt::format("--descriptor '{}': expected key=value[,key=value...]", descriptor));
        }
        entries.push_back({{"key", entry.substr(0, equals)}, {"value", entry.substr(equals + 1)}});
      }
      descriptors.push_back({{"entries", std::move(entries)}});
    }
    body["descriptors"] = std::move(descriptors);
  }
  return body;
}

std::string Dump(const nlohmann::ordered_json& body) {
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace

absl::StatusOr<std::string> CheckBody(const CheckFlags& flags) {
  absl::StatusOr<nlohmann::ordered_json> body = KeysBody(flags);
  if (!body.ok()) {
    return body.status();
  }
  if (flags.max_debt) {
    if (flags.key.empty()) {
      return absl::InvalidArgumentError(
          "--max-debt is for ad hoc limits (--key); rules mode takes it from the rules");
    }
    (*body)["max_debt"] = *flags.max_debt;
  }
  (*body)["cost"] = flags.cost;
  if (!flags.max_wait.empty()) {
    (*body)["max_wait"] = flags.max_wait;
  }
  if (flags.receipt) {
    (*body)["receipt"] = true;
  }
  if (flags.explain) {
    (*body)["explain"] = true;
  }
  return Dump(*body);
}

absl::StatusOr<std::string> ResetBody(const CheckFlags& flags) {
  absl::StatusOr<nlohmann::ordered_json> body = KeysBody(flags);
  if (!body.ok()) {
    return body.status();
  }
  return Dump(*body);
}

absl::StatusOr<std::string> Endpoint(std::string_view server, std::string_view path) {
  std::string base(server);
  if (base.find("://") == std::string::npos) {
    base.insert(0, "http://");  // HOST:PORT, as curl takes it.
  } else if (!base.starts_with("http://")) {
    return absl::InvalidArgumentError(fmt::format(
        "--server '{}': expected http://HOST:PORT (sluiced's HTTP API is plain HTTP)", server));
  }
  while (base.ends_with('/')) {
    base.pop_back();
  }
  if (absl::StatusOr<Url> url = ParseUrl(base); !url.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("--server '{}': {}", server, std::string(url.status().message())));
  }
  return base.append(path);
}

namespace {

// One exchange of `method` with `url` (see PostJson).
absl::StatusOr<HttpAnswer> Exchange(http::verb method, const std::string& url,
                                    const std::string& body, std::string_view timeout,
                                    std::string_view bearer_token) {
  absl::StatusOr<Url> parsed = ParseUrl(url);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        fmt::format("'{}': {}", url, std::string(parsed.status().message())));
  }
  absl::StatusOr<Micros> limit = ParseDuration(timeout);
  if (!limit.ok()) {
    return limit.status();
  }
  asio::io_context context;
  asio::ip::tcp::resolver resolver(context);
  beast::tcp_stream stream(context);
  beast::error_code ec;
  auto unavailable = [&](std::string_view step) {
    return absl::UnavailableError(fmt::format("{}: cannot {}: {}", url, step, ec.message()));
  };
  const auto endpoints = resolver.resolve(parsed->host, parsed->port, ec);
  if (ec) {
    return unavailable("resolve the host");
  }
  http::request<http::string_body> request{method, parsed->target, 11};
  request.set(http::field::host, parsed->host);
  if (method == http::verb::post) {
    request.set(http::field::content_type, "application/json");
  }
  request.set(http::field::user_agent, "sluice");
  if (!bearer_token.empty()) {
    request.set(http::field::authorization, fmt::format("Bearer {}", bearer_token));
  }
  request.body() = body;
  request.prepare_payload();
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  // Asynchronous, because tcp_stream's timeout (one for the whole exchange) bounds only
  // asynchronous operations.
  std::string_view failed_step;
  stream.expires_after(*limit);
  stream.async_connect(endpoints, [&](beast::error_code connect_ec, const auto&) {
    if ((ec = connect_ec)) {
      failed_step = "connect";
      return;
    }
    http::async_write(stream, request, [&](beast::error_code write_ec, size_t) {
      if ((ec = write_ec)) {
        failed_step = "send the request";
        return;
      }
      http::async_read(stream, buffer, response, [&](beast::error_code read_ec, size_t) {
        if ((ec = read_ec)) {
          failed_step = "read the answer";
        }
      });
    });
  });
  context.run();
  if (ec) {
    return unavailable(failed_step);
  }
  return HttpAnswer{.status = response.result_int(), .body = std::move(response.body())};
}

}  // namespace

absl::StatusOr<HttpAnswer> PostJson(const std::string& url, const std::string& body,
                                    std::string_view timeout, std::string_view bearer_token) {
  return Exchange(http::verb::post, url, body, timeout, bearer_token);
}

absl::StatusOr<HttpAnswer> GetJson(const std::string& url, std::string_view timeout,
                                   std::string_view bearer_token) {
  return Exchange(http::verb::get, url, "", timeout, bearer_token);
}

std::string Printable(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      c = '?';
    }
  }
  return out;
}

std::string ErrorOf(const HttpAnswer& answer) {
  const auto json = nlohmann::json::parse(answer.body, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("error") && json["error"].is_string()) {
    return json["error"].get<std::string>();
  }
  return answer.body;
}

absl::StatusOr<HttpAnswer> PostAs(std::string_view command, std::string_view server,
                                  std::string_view path, const std::string& body,
                                  std::string_view timeout, std::string_view bearer_token) {
  absl::StatusOr<std::string> url = Endpoint(server, path);
  absl::StatusOr<HttpAnswer> answer =
      url.ok() ? PostJson(*url, body, timeout, bearer_token) : url.status();
  if (!answer.ok()) {
    std::cerr << "sluice " << command << ": " << answer.status().message() << "\n";
  }
  return answer;
}

}  // namespace sluice::tools
