// GrpcH2Session (the h2 engine's HTTP/2 and gRPC) fed frames written here byte by byte, as a
// client or an attacker would send them, on a clock the test moves: the calls it serves, the
// errors gRPC asks for, deadlines, cancellation, the drain, and each attack on HTTP/2 servers
// bounded (rapid reset, CONTINUATION and PING and SETTINGS floods, a header list too large
// or blown up through HPACK's table, too many streams, silence).

#include "server/grpc/h2_session.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include <nghttp2/nghttp2.h>

#include "server/grpc/grpc_wire.h"

namespace sluice::server {
namespace {

using std::chrono::milliseconds;

constexpr std::string_view kPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr uint8_t kData = 0, kHeaders = 1, kRstStream = 3, kSettings = 4, kPing = 6, kGoaway = 7,
                  kContinuation = 9;
constexpr uint8_t kEndStream = 0x1, kEndHeaders = 0x4, kAck = 0x1;

std::string U32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  std::string f = {static_cast<char>(n >> 16), static_cast<char>(n >> 8), static_cast<char>(n),
                   static_cast<char>(type), static_cast<char>(flags)};
  return f + U32(stream) + std::string(payload);
}

// HPACK's integer with an n-bit prefix, its first byte's high bits `high`.
std::string HpackInt(uint8_t high, int bits, size_t value) {
  const size_t max = (size_t{1} << bits) - 1;
  if (value < max) {
    return {static_cast<char>(high | value)};
  }
  std::string out = {static_cast<char>(high | max)};
  for (value -= max; value >= 128; value /= 128) {
    out.push_back(static_cast<char>(value % 128 + 128));
  }
  out.push_back(static_cast<char>(value));
  return out;
}

// A header field as a literal: without indexing, or (`index`) added to the decoder's table.
std::string Literal(std::string_view name, std::string_view value, bool index = false) {
  return HpackInt(index ? 0x40 : 0x00, index ? 6 : 4, 0) + HpackInt(0, 7, name.size()) +
         std::string(name) + HpackInt(0, 7, value.size()) + std::string(value);
}

std::string RequestHeaders(std::string_view path,
                           std::string_view content_type = "application/grpc",
                           std::string_view extra = "") {
  return Literal(":method", "POST") + Literal(":scheme", "http") + Literal(":path", path) +
         Literal(":authority", "sluice") + Literal("content-type", content_type) +
         Literal("te", "trailers") + std::string(extra);
}

std::string Message(std::string_view bytes, char flag = 0) {
  return std::string(1, flag) + U32(static_cast<uint32_t>(bytes.size())) + std::string(bytes);
}

// A unary call on `stream`: its headers, then its message ending the stream.
std::string Call(uint32_t stream, std::string_view path, std::string_view message,
                 std::string_view extra = "") {
  return Frame(kHeaders, kEndHeaders, stream, RequestHeaders(path, "application/grpc", extra)) +
         Frame(kData, kEndStream, stream, Message(message));
}

struct Received {
  uint8_t type;
  uint8_t flags;
  uint32_t stream;
  std::string payload;
};

// Echoes /echo at once; holds /hold until the test releases it; any other path UNIMPLEMENTED.
class TestService final : public GrpcUnaryService {
 public:
  void Call(std::string_view path, std::string_view request, Done done) override {
    ++calls;
    if (path == "/echo") {
      std::move(done)(GrpcReply{.body = std::string(request)});
    } else if (path == "/hold") {
      held.push_back(std::move(done));
    } else {
      std::move(done)({GrpcCode::kUnimplemented, "unknown method " + std::string(path)});
    }
  }
  int calls = 0;
  std::vector<Done> held;
};

class H2SessionTest : public ::testing::Test {
 protected:
  H2SessionTest() {
    inflater_ = nullptr;
    nghttp2_hd_inflate_new(&inflater_);
  }
  ~H2SessionTest() override { nghttp2_hd_inflate_del(inflater_); }

  GrpcH2Session& Session() {
    if (!session_) {
      session_.emplace(
          service_, options_,
          [this](int32_t id) -> GrpcUnaryService::Done {
            return [this, id](GrpcReply reply) { session_->Answer(id, std::move(reply)); };
          },
          now_);
    }
    return *session_;
  }

  // Sends `bytes` (after the preface and an empty SETTINGS, the first time): whether the
  // session goes on.
  bool Send(std::string bytes) {
    if (!started_) {
      started_ = true;
      bytes = std::string(kPreface) + Frame(kSettings, 0, 0, "") + bytes;
    }
    return Session().Receive({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, now_);
  }

  // The frames the session has to send now.
  std::vector<Received> Read() {
    std::string out;
    EXPECT_TRUE(Session().Send(out, size_t{1} << 24));
    std::vector<Received> frames;
    for (size_t at = 0; at + 9 <= out.size();) {
      const auto byte = [&](size_t i) { return static_cast<uint8_t>(out[at + i]); };
      const size_t n = byte(0) << 16 | byte(1) << 8 | byte(2);
      frames.push_back(
          {byte(3), byte(4),
           static_cast<uint32_t>((byte(5) & 0x7f) << 24 | byte(6) << 16 | byte(7) << 8 | byte(8)),
           out.substr(at + 9, n)});
      at += 9 + n;
    }
    return frames;
  }

  // The header fields of a HEADERS frame the session sent (decoded with nghttp2's HPACK, in
  // order, so that its table follows the session's).
  std::map<std::string, std::string> Decode(const Received& frame) {
    std::map<std::string, std::string> fields;
    auto* in = reinterpret_cast<const uint8_t*>(frame.payload.data());
    size_t left = frame.payload.size();
    for (;;) {
      nghttp2_nv nv;
      int flags = 0;
      const ssize_t used = nghttp2_hd_inflate_hd2(inflater_, &nv, &flags, in, left, 1);
      EXPECT_GE(used, 0);
      if (used < 0) {
        break;
      }
      in += used;
      left -= static_cast<size_t>(used);
      if ((flags & NGHTTP2_HD_INFLATE_EMIT) != 0) {
        fields[std::string(reinterpret_cast<char*>(nv.name), nv.namelen)] =
            std::string(reinterpret_cast<char*>(nv.value), nv.valuelen);
      }
      if ((flags & NGHTTP2_HD_INFLATE_FINAL) != 0) {
        nghttp2_hd_inflate_end_headers(inflater_);
        break;
      }
      if (left == 0 && (flags & NGHTTP2_HD_INFLATE_EMIT) == 0) {
        break;
      }
    }
    return fields;
  }

  // Each stream's grpc-status as the frames sent say it (decoding every HEADERS frame).
  std::map<uint32_t, std::string> Statuses(const std::vector<Received>& frames) {
    std::map<uint32_t, std::string> statuses;
    for (const Received& f : frames) {
      if (f.type == kHeaders) {
        auto fields = Decode(f);
        if (fields.contains("grpc-status")) {
          statuses[f.stream] = fields["grpc-status"];
        }
      }
    }
    return statuses;
  }

  static bool Has(const std::vector<Received>& frames, uint8_t type, uint32_t stream = 0) {
    for (const Received& f : frames) {
      if (f.type == type && (stream == 0 || f.stream == stream)) {
        return true;
      }
    }
    return false;
  }

  H2Options options_{.max_concurrent_streams = 16,
                     .max_message_bytes = 1024,
                     .max_header_bytes = 4096,
                     .ping_interval = Micros{60'000'000},
                     .ping_timeout = Micros{5'000'000}};
  TestService service_;
  SteadyTime now_{std::chrono::seconds(1000)};
  std::optional<GrpcH2Session> session_;
  bool started_ = false;
  nghttp2_hd_inflater* inflater_;
};

TEST_F(H2SessionTest, ManyCallsInOneReadAreAnsweredInOneWrite) {
  std::string calls;
  for (uint32_t id = 1; id <= 9; id += 2) {
    calls += Call(id, "/echo", "m" + std::to_string(id));
  }
  ASSERT_TRUE(Send(calls));
  const std::vector<Received> frames = Read();  // One Send: everything the read asked for.
  const auto statuses = Statuses(frames);
  for (uint32_t id = 1; id <= 9; id += 2) {
    EXPECT_EQ(statuses.at(id), "0") << id;
    bool echoed = false;
    for (const Received& f : frames) {
      echoed |= f.type == kData && f.stream == id && f.payload == Message("m" + std::to_string(id));
    }
    EXPECT_TRUE(echoed) << id;
  }
  EXPECT_FALSE(Session().Busy());
}

TEST_F(H2SessionTest, ErrorsAreTheStatusesGrpcAsksFor) {
  ASSERT_TRUE(Send(Call(1, "/nowhere", "x") +
                   Frame(kHeaders, kEndHeaders, 3, RequestHeaders("/echo")) +
                   Frame(kData, kEndStream, 3, Message("x", 1)) +  // Compressed.
                   Frame(kHeaders, kEndHeaders, 5, RequestHeaders("/echo")) +
                   Frame(kData, kEndStream, 5, Message("xy").substr(0, 6)) +  // Cut short.
                   Frame(kHeaders, kEndHeaders, 7, RequestHeaders("/echo", "text/plain")) +
                   Frame(kData, kEndStream, 7, Message("x"))));
  std::vector<Received> frames = Read();
  std::map<uint32_t, std::map<std::string, std::string>> fields;
  for (const Received& f : frames) {
    if (f.type == kHeaders) {
      fields[f.stream] = Decode(f);
    }
  }
  EXPECT_EQ(fields[1]["grpc-status"], "12");
  EXPECT_EQ(fields[1]["grpc-message"], "unknown method /nowhere");
  EXPECT_EQ(fields[3]["grpc-status"], "12");
  EXPECT_EQ(fields[5]["grpc-status"], "13");
  EXPECT_EQ(fields[7][":status"], "415");
  EXPECT_EQ(service_.calls, 1);  // Only the unknown method reached the service.
}

TEST_F(H2SessionTest, AMessageOverTheBoundIsRefusedFromItsPrefixAndNotKept) {
  // The prefix says 1 MiB; only 100 bytes come: refused at once, nothing waited for.
  ASSERT_TRUE(
      Send(Frame(kHeaders, kEndHeaders, 1, RequestHeaders("/echo")) +
           Frame(kData, 0, 1, std::string(1, '\0') + U32(1 << 20) + std::string(100, 'a'))));
  const std::vector<Received> frames = Read();
  EXPECT_EQ(Statuses(frames).at(1), "8");
  EXPECT_TRUE(Has(frames, kRstStream, 1));
  EXPECT_EQ(service_.calls, 0);
}

TEST_F(H2SessionTest, ADeadlinePassedIsAnsweredAndTheLateReplyDropped) {
  ASSERT_TRUE(Send(Call(1, "/hold", "x", Literal("grpc-timeout", "100m"))));
  Read();
  ASSERT_EQ(service_.held.size(), 1U);
  EXPECT_LE(Session().NextTick(), now_ + milliseconds(100));
  now_ += milliseconds(99);
  ASSERT_TRUE(Session().Tick(now_));
  EXPECT_TRUE(Read().empty());
  now_ += milliseconds(1);
  ASSERT_TRUE(Session().Tick(now_));
  EXPECT_EQ(Statuses(Read()).at(1), "4");
  std::move(service_.held[0])(GrpcReply{.body = "late"});
  EXPECT_TRUE(Read().empty());
  // A call answered in time leaves no wake-up for its deadline: the next is the keep-alive's.
  ASSERT_TRUE(Send(Call(3, "/echo", "x", Literal("grpc-timeout", "100m"))));
  EXPECT_EQ(Statuses(Read()).at(3), "0");
  EXPECT_EQ(Session().NextTick(), now_ + options_.ping_interval);
}

TEST_F(H2SessionTest, AResetCallIsForgottenAndItsReplyDropped) {
  ASSERT_TRUE(Send(Call(1, "/hold", "x")));
  Read();
  EXPECT_TRUE(Session().Busy());
  ASSERT_TRUE(Send(Frame(kRstStream, 0, 1, U32(NGHTTP2_CANCEL))));
  EXPECT_FALSE(Session().Busy());
  std::move(service_.held[0])(GrpcReply{.body = "late"});
  EXPECT_TRUE(Read().empty());
}

TEST_F(H2SessionTest, ADrainSaysGoawayAndAnswersTheCallsBegun) {
  ASSERT_TRUE(Send(Call(1, "/hold", "x")));
  Read();
  Session().Drain();
  EXPECT_TRUE(Has(Read(), kGoaway));
  EXPECT_FALSE(Session().Finished());
  ASSERT_TRUE(Send(Call(3, "/echo", "y")));  // Past the GOAWAY's last stream: not served.
  std::move(service_.held[0])(GrpcReply{.body = "z"});
  const auto statuses = Statuses(Read());
  EXPECT_EQ(statuses.at(1), "0");
  EXPECT_FALSE(statuses.contains(3));
  EXPECT_EQ(service_.calls, 1);

  EXPECT_TRUE(Session().Finished());
}

TEST_F(H2SessionTest, AStreamOpenedBeforeTheGoawayWentOutIsRefused) {
  ASSERT_TRUE(Send(Call(1, "/echo", "x")));
  Session().Drain();  // Submitted, not yet written: the client opens stream 3 meanwhile.
  ASSERT_TRUE(Send(Call(3, "/echo", "y")));
  const std::vector<Received> frames = Read();
  bool refused = false;
  for (const Received& f : frames) {
    refused |= f.type == kRstStream && f.stream == 3 && f.payload == U32(NGHTTP2_REFUSED_STREAM);
  }
  EXPECT_TRUE(refused);  // So that it may go elsewhere without being counted here too.
  EXPECT_EQ(Statuses(frames).at(1), "0");
  EXPECT_EQ(service_.calls, 1);
}

TEST_F(H2SessionTest, StreamsPastTheLimitAreRefused) {
  std::string calls;
  for (uint32_t id = 1; id <= 2 * 17; id += 2) {
    calls += Frame(kHeaders, kEndHeaders, id, RequestHeaders("/hold"));
  }
  Send(calls);
  const std::vector<Received> frames = Read();
  EXPECT_TRUE(Has(frames, kRstStream, 33) || Has(frames, kGoaway));
  EXPECT_FALSE(Has(frames, kRstStream, 31));
}

TEST_F(H2SessionTest, RapidResetEndsTheConnection) {
  // CVE-2023-44487: streams opened and reset at once, never counted as open. nghttp2's reset
  // rate limit (a burst of 1,000, then 33 a second) says GOAWAY; no stream is served after.
  uint32_t id = 1;
  bool goaway = false;
  for (; !goaway && id < 2 * 5000; id += 2) {
    ASSERT_TRUE(Send(Frame(kHeaders, kEndHeaders, id, RequestHeaders("/hold")) +
                     Frame(kRstStream, 0, id, U32(NGHTTP2_CANCEL))));
    goaway = Has(Read(), kGoaway);
  }
  EXPECT_TRUE(goaway) << "5,000 resets within moments were all taken";
  Send(Call(id, "/echo", "after"));
  EXPECT_FALSE(Statuses(Read()).contains(id));
  EXPECT_TRUE(Session().Finished());  // The connection then closes.
}

TEST_F(H2SessionTest, AContinuationFloodEndsTheConnection) {
  // CVE-2024-28182 class: one header block in ever more CONTINUATION frames.
  std::string flood = Frame(kHeaders, 0, 1, Literal(":method", "POST"));
  for (int i = 0; i < 100; ++i) {
    flood += Frame(kContinuation, 0, 1, Literal("x-pad", "0123456789"));
  }
  EXPECT_FALSE(Send(flood));
  EXPECT_EQ(service_.calls, 0);
}

TEST_F(H2SessionTest, PingAndSettingsFloodsThatNeverReadEndTheConnection) {
  std::string pings;
  for (int i = 0; i < 5000; ++i) {
    pings += Frame(kPing, 0, 0, "12345678");
  }
  EXPECT_FALSE(Send(pings));  // Acknowledgements queued past the bound, never read.

  session_.reset();
  started_ = false;
  std::string entries;
  for (int i = 0; i < 100; ++i) {
    entries += std::string{0, 3} + U32(100);  // MAX_CONCURRENT_STREAMS, a hundred times.
  }
  Send(Frame(kSettings, 0, 0, entries));  // Past nghttp2's bound of entries in one frame.
  EXPECT_TRUE(Has(Read(), kGoaway));
  EXPECT_TRUE(Session().Finished());
}

TEST_F(H2SessionTest, HeaderListsOverTheBoundAreRefusedAndOthersServed) {
  // One header too large; then HPACK's bomb: a 3,000-byte value put in the table once and
  // named by its index twenty times (each 1-byte reference is 3,000 bytes decoded).
  ASSERT_TRUE(Send(Frame(
      kHeaders, kEndHeaders | kEndStream, 1,
      RequestHeaders("/echo", "application/grpc", Literal("x-big", std::string(5000, 'a'))))));
  std::string bomb = RequestHeaders("/echo", "application/grpc",
                                    Literal("x-bomb", std::string(3000, 'b'), /*index=*/true));
  for (int i = 0; i < 20; ++i) {
    bomb += HpackInt(0x80, 7, 62);  // The table's newest entry.
  }
  Send(Frame(kHeaders, kEndHeaders | kEndStream, 3, bomb));
  ASSERT_TRUE(Send(Call(5, "/echo", "fine")));
  const std::vector<Received> frames = Read();
  EXPECT_TRUE(Has(frames, kRstStream, 1));
  EXPECT_TRUE(Has(frames, kRstStream, 3));
  EXPECT_EQ(Statuses(frames).at(5), "0");
  EXPECT_EQ(service_.calls, 1);
}

TEST_F(H2SessionTest, ARequestNotWholeInTimeIsResetAndHugeTimeoutsAreBounded) {
  // Headers, then part of a message, then nothing: reset after preface_timeout, no call made.
  ASSERT_TRUE(Send(Frame(kHeaders, kEndHeaders, 1, RequestHeaders("/echo")) +
                   Frame(kData, 0, 1, Message("abcdef").substr(0, 7))));
  Read();
  now_ += options_.preface_timeout - Micros{1};
  ASSERT_TRUE(Session().Tick(now_));
  EXPECT_FALSE(Has(Read(), kRstStream, 1));
  now_ += Micros{1};
  ASSERT_TRUE(Session().Tick(now_));
  EXPECT_TRUE(Has(Read(), kRstStream, 1));
  EXPECT_EQ(service_.calls, 0);
  // Eight digits of hours: bounded to 100 days, not an overflow into the past.
  ASSERT_TRUE(Send(Call(3, "/hold", "x", Literal("grpc-timeout", "99999999H"))));
  Read();
  EXPECT_EQ(Session().NextTick(), now_ + options_.ping_interval);  // Long before the deadline.
  now_ += std::chrono::hours(24 * 100);
  ASSERT_TRUE(Session().Tick(now_));
  EXPECT_EQ(Statuses(Read()).at(3), "4");
}

TEST_F(H2SessionTest, SilenceEndsTheConnection) {
  Session();
  EXPECT_TRUE(Session().Tick(now_ + Micros{9'999'000}));
  EXPECT_FALSE(Session().Tick(now_ + Micros{10'000'000}));  // No preface in 10 s.

  session_.reset();
  started_ = false;
  ASSERT_TRUE(Send(""));
  Read();
  now_ += options_.ping_interval;
  ASSERT_TRUE(Session().Tick(now_));
  EXPECT_TRUE(Has(Read(), kPing));
  now_ += options_.ping_timeout - Micros{1};
  EXPECT_TRUE(Session().Tick(now_));
  ASSERT_TRUE(Send(Frame(kPing, kAck, 0, std::string(8, '\0'))));  // Acknowledged in time.
  now_ += Micros{2};
  EXPECT_TRUE(Session().Tick(now_));
  now_ += options_.ping_interval;
  ASSERT_TRUE(Session().Tick(now_));
  Read();
  now_ += options_.ping_timeout;
  EXPECT_FALSE(Session().Tick(now_));  // This one never was.
}

TEST(GrpcWireTest, TimeoutsMessagesAndEncoding) {
  EXPECT_EQ(ParseGrpcTimeout("100m"), Micros{100'000});
  EXPECT_EQ(ParseGrpcTimeout("2S"), Micros{2'000'000});
  EXPECT_EQ(ParseGrpcTimeout("1H"), Micros{int64_t{3'600'000'000}});
  EXPECT_EQ(ParseGrpcTimeout("1n"), Micros{1});
  EXPECT_EQ(ParseGrpcTimeout("99999999M"), Micros{int64_t{99'999'999} * 60'000'000});
  for (const char* bad : {"", "m", "100", "123456789S", "1x", "-1S", "1 S"}) {
    EXPECT_EQ(ParseGrpcTimeout(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(OneGrpcMessage(Message("abc"), 10).message, "abc");
  EXPECT_EQ(OneGrpcMessage(Message("abc") + "x", 10).error.code, GrpcCode::kInternal);
  EXPECT_EQ(OneGrpcMessage(Message(std::string(11, 'a')), 10).error.code,
            GrpcCode::kResourceExhausted);
  EXPECT_EQ(OneGrpcMessage(std::string(1, '\2') + U32(0), 10).error.code, GrpcCode::kInternal);
  EXPECT_EQ(FrameGrpcMessage("abc"), Message("abc"));
  EXPECT_EQ(PercentEncode("a%b\nc\xff"), "a%25b%0Ac%FF");
}

}  // namespace
}  // namespace sluice::server
