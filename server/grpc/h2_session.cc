#include "server/grpc/h2_session.h"

#include <algorithm>
#include <array>
#include <string_view>

#include "fmt/format.h"
#include <nghttp2/nghttp2.h>

namespace sluice::server {
namespace {

// The longest grpc-timeout kept (its 8 digits of hours would overflow the clock).
constexpr Micros kLongestDeadline{int64_t{100} * 24 * 3600 * 1'000'000};
// The most request bytes a connection holds at once, over all its streams: one stream's bound
// is max_message_bytes, and without this many streams would hold many times it.
constexpr size_t kMaxBufferedBytes = size_t{16} << 20;
// The connection's receive window: calls from many streams may be in flight at once.
constexpr int32_t kConnectionWindow = 1 << 20;
// nghttp2's bounds on floods, set here rather than left to its defaults, which have changed
// between versions: SETTINGS frames in one go, acknowledgements queued, CONTINUATION frames
// of one header block, and stream resets (a burst, then per second).
constexpr size_t kMaxSettings = 32;
constexpr size_t kMaxOutboundAcks = 1000;
constexpr size_t kMaxContinuations = 8;
constexpr uint64_t kResetBurst = 1000;
constexpr uint64_t kResetsPerSecond = 33;

// A name and value for nghttp2, which copies them when they are submitted.
nghttp2_nv Header(std::string_view name, std::string_view value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

}  // namespace

// nghttp2's callbacks, each given the session as its user data.
struct GrpcH2Session::Callbacks {
  static int BeginHeaders(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    auto& s = *static_cast<GrpcH2Session*>(user);
    if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
      return 0;
    }
    if (s.draining_ && frame->hd.stream_id > s.goaway_last_) {
      // Opened before our GOAWAY reached the client, past the last stream it names: refused,
      // so that the client may send it elsewhere without its being counted here too.
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                NGHTTP2_REFUSED_STREAM);
      return 0;
    }
    s.streams_.try_emplace(frame->hd.stream_id);
    // Its request must be whole within preface_timeout, or it is reset (Tick).
    s.deadlines_.push({s.now_ + s.options_.preface_timeout, frame->hd.stream_id, true});
    return 0;
  }

  static int OnHeader(nghttp2_session* session, const nghttp2_frame* frame, const uint8_t* name,
                      size_t name_size, const uint8_t* value, size_t value_size, uint8_t,
                      void* user) {
    auto& s = *static_cast<GrpcH2Session*>(user);
    const auto it = s.streams_.find(frame->hd.stream_id);
    if (it == s.streams_.end()) {
      return 0;  // A request's trailers, or a stream already refused.
    }
    Stream& stream = it->second;
    stream.header_bytes += name_size + value_size + 32;
    if (stream.header_bytes > s.options_.max_header_bytes) {
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                NGHTTP2_ENHANCE_YOUR_CALM);
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    const std::string_view key(reinterpret_cast<const char*>(name), name_size);
    const std::string_view text(reinterpret_cast<const char*>(value), value_size);
    if (key == ":path") {
      stream.path = text;
    } else if (key == "content-type") {
      stream.content_type = text;
    } else if (key == "grpc-timeout") {
      if (const std::optional<Micros> timeout = ParseGrpcTimeout(text)) {
        // Up to 8 digits of hours would overflow the clock: beyond 100 days, 100 days.
        stream.deadline = s.now_ + std::min(*timeout, kLongestDeadline);
      }
    }
    return 0;
  }

  static int OnData(nghttp2_session*, uint8_t, int32_t id, const uint8_t* data, size_t size,
                    void* user) {
    auto& s = *static_cast<GrpcH2Session*>(user);
    const auto it = s.streams_.find(id);
    if (it == s.streams_.end() || it->second.refused) {
      return 0;
    }
    Stream& stream = it->second;
    if (s.buffered_ + size > kMaxBufferedBytes) {
      // The connection's requests together hold too much: this one is refused.
      s.Forget(stream);
      stream.refused = true;
      s.Answer(id, {GrpcCode::kResourceExhausted,
                    fmt::format("the connection's requests hold more than {} bytes",
                                kMaxBufferedBytes)});
      return 0;
    }
    stream.body.append(reinterpret_cast<const char*>(data), size);
    s.buffered_ += size;
    const std::optional<uint64_t> declared = DeclaredGrpcLength(stream.body);
    if ((declared && *declared > s.options_.max_message_bytes) ||
        stream.body.size() > s.options_.max_message_bytes + 5) {
      // Refused as soon as the prefix says so: the rest is neither kept nor waited for.
      stream.refused = true;
      s.Forget(stream);
      // The response is followed by RST_STREAM NO_ERROR (Sent), which tells the client to
      // stop sending the rest.
      s.Answer(id, {GrpcCode::kResourceExhausted,
                    fmt::format("the request's message is over the limit of {} bytes",
                                s.options_.max_message_bytes)});
    }
    return 0;
  }

  static int OnFrame(nghttp2_session*, const nghttp2_frame* frame, void* user) {
    auto& s = *static_cast<GrpcH2Session*>(user);
    s.preface_seen_ = true;  // nghttp2 reads no frame before the client's preface.
    if (frame->hd.type == NGHTTP2_PING && (frame->hd.flags & NGHTTP2_FLAG_ACK) != 0) {
      s.ping_sent_.reset();
      return 0;
    }
    if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
      return 0;
    }
    const auto it = s.streams_.find(frame->hd.stream_id);
    if (it != s.streams_.end() && !it->second.dispatched && !it->second.refused) {
      s.Dispatch(frame->hd.stream_id, it->second);
    }
    return 0;
  }

  // A refused request's response is followed by RST_STREAM NO_ERROR: the client stops
  // sending it (HTTP/2 allows this once a response is whole).
  static int Sent(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
    auto& s = *static_cast<GrpcH2Session*>(user);
    if (frame->hd.type != NGHTTP2_HEADERS || (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
      return 0;
    }
    const auto it = s.streams_.find(frame->hd.stream_id);
    if (it != s.streams_.end() && it->second.refused) {
      nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_NO_ERROR);
    }
    return 0;
  }

  static int OnClose(nghttp2_session*, int32_t id, uint32_t, void* user) {
    // A call still deciding finds no stream: its answer is dropped.
    auto& s = *static_cast<GrpcH2Session*>(user);
    if (const auto it = s.streams_.find(id); it != s.streams_.end()) {
      s.Forget(it->second);
      s.streams_.erase(it);
    }
    return 0;
  }

  static ssize_t ReadReply(nghttp2_session* session, int32_t id, uint8_t* buf, size_t length,
                           uint32_t* flags, nghttp2_data_source*, void* user) {
    auto& s = *static_cast<GrpcH2Session*>(user);
    const auto it = s.streams_.find(id);
    if (it == s.streams_.end()) {
      return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
    }
    Stream& stream = it->second;
    const size_t n = std::min(length, stream.out.size() - stream.sent);
    std::copy_n(stream.out.data() + stream.sent, n, buf);
    stream.sent += n;
    if (stream.sent == stream.out.size()) {
      *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const std::array<nghttp2_nv, 1> trailers{Header("grpc-status", "0")};
      nghttp2_submit_trailer(session, id, trailers.data(), trailers.size());
    }
    return static_cast<ssize_t>(n);
  }
};

GrpcH2Session::GrpcH2Session(GrpcUnaryService& service, const H2Options& options,
                             Responder responder, SteadyTime now)
    : service_(service),
      options_(options),
      responder_(std::move(responder)),
      started_(now),
      last_read_(now),
      now_(now) {
  if (!Make() && session_ != nullptr) {
    nghttp2_session_del(session_);
    session_ = nullptr;
  }
}

GrpcH2Session::~GrpcH2Session() {
  if (session_ != nullptr) {
    nghttp2_session_del(session_);
  }
}

bool GrpcH2Session::Make() {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_option* option = nullptr;
  if (nghttp2_session_callbacks_new(&callbacks) != 0) {
    return false;
  }
  if (nghttp2_option_new(&option) != 0) {
    nghttp2_session_callbacks_del(callbacks);
    return false;
  }
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, Callbacks::BeginHeaders);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, Callbacks::OnHeader);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, Callbacks::OnData);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, Callbacks::OnFrame);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, Callbacks::OnClose);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, Callbacks::Sent);
  nghttp2_option_set_max_settings(option, kMaxSettings);
  nghttp2_option_set_max_outbound_ack(option, kMaxOutboundAcks);
  nghttp2_option_set_max_continuations(option, kMaxContinuations);
  nghttp2_option_set_stream_reset_rate_limit(option, kResetBurst, kResetsPerSecond);
  const int made = nghttp2_session_server_new2(&session_, callbacks, this, option);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
  if (made != 0) {
    session_ = nullptr;
    return false;
  }
  const std::array<nghttp2_settings_entry, 2> settings{{
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, options_.max_concurrent_streams},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, static_cast<uint32_t>(options_.max_header_bytes)},
  }};
  return nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size()) ==
             0 &&
         nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0, kConnectionWindow) ==
             0;
}

bool GrpcH2Session::Receive(std::span<const uint8_t> bytes, SteadyTime now) {
  now_ = last_read_ = now;
  return nghttp2_session_mem_recv(session_, bytes.data(), bytes.size()) >= 0;
}

bool GrpcH2Session::Send(std::string& out, size_t max) {
  while (out.size() < max) {
    const uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      return false;
    }
    if (n == 0) {
      break;
    }
    out.append(reinterpret_cast<const char*>(data), static_cast<size_t>(n));
  }
  return true;
}

bool GrpcH2Session::Finished() const {
  return (nghttp2_session_want_read(session_) == 0 && nghttp2_session_want_write(session_) == 0) ||
         (draining_ && streams_.empty());
}

void GrpcH2Session::Drain() {
  if (draining_) {
    return;
  }
  draining_ = true;
  // Calls already begun are answered; the client opens new ones elsewhere.
  goaway_last_ = nghttp2_session_get_last_proc_stream_id(session_);
  nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE, goaway_last_, NGHTTP2_NO_ERROR, nullptr, 0);
}

void GrpcH2Session::Dispatch(int32_t id, Stream& stream) {
  stream.dispatched = true;
  if (!stream.content_type.starts_with("application/grpc")) {
    // Not gRPC: HTTP's own answer, as gRPC's servers give it.
    const std::array<nghttp2_nv, 1> headers{Header(":status", "415")};
    stream.answered = true;
    nghttp2_submit_response(session_, id, headers.data(), headers.size(), nullptr);
    return;
  }
  const GrpcMessage message = OneGrpcMessage(stream.body, options_.max_message_bytes);
  if (!message.message) {
    Answer(id, message.error);
    return;
  }
  if (stream.deadline) {
    deadlines_.push({*stream.deadline, id, false});
  }
  service_.Call(stream.path, *message.message, responder_(id));
  // The request is read: its bytes go (the stream may be answered and gone already).
  if (const auto it = streams_.find(id); it != streams_.end()) {
    Forget(it->second);
  }
}

void GrpcH2Session::Forget(Stream& stream) {
  buffered_ -= stream.body.size();
  std::string().swap(stream.body);
}

void GrpcH2Session::Answer(int32_t id, GrpcReply reply) {
  const auto it = streams_.find(id);
  if (it == streams_.end() || it->second.answered) {
    return;  // Reset by the client, or past its deadline.
  }
  Stream& stream = it->second;
  stream.answered = true;
  if (reply.code == GrpcCode::kOk) {
    stream.out = FrameGrpcMessage(reply.body);
    const std::array<nghttp2_nv, 2> headers{Header(":status", "200"),
                                            Header("content-type", "application/grpc")};
    nghttp2_data_provider body{};
    body.read_callback = Callbacks::ReadReply;
    nghttp2_submit_response(session_, id, headers.data(), headers.size(), &body);
    return;
  }
  // Trailers-only: the status in the one HEADERS frame, which ends the stream.
  const std::string code = std::to_string(static_cast<int>(reply.code));
  const std::string message = PercentEncode(reply.message);
  const std::array<nghttp2_nv, 4> headers{
      Header(":status", "200"), Header("content-type", "application/grpc"),
      Header("grpc-status", code), Header("grpc-message", message)};
  nghttp2_submit_response(session_, id, headers.data(), headers.size(), nullptr);
}

bool GrpcH2Session::Tick(SteadyTime now) {
  now_ = now;
  if (!preface_seen_ && now - started_ >= options_.preface_timeout) {
    return false;  // Connected, and never spoke HTTP/2.
  }
  if (ping_sent_ && now - *ping_sent_ >= options_.ping_timeout) {
    return false;  // Gone without a word: its calls have nobody to answer.
  }
  while (!deadlines_.empty() && deadlines_.top().at <= now) {
    const Deadline due = deadlines_.top();
    deadlines_.pop();
    const auto it = streams_.find(due.stream);
    if (it == streams_.end() || it->second.answered) {
      continue;
    }
    if (!due.whole) {
      Answer(due.stream, {GrpcCode::kDeadlineExceeded, "the call's grpc-timeout passed"});
    } else if (!it->second.dispatched && !it->second.refused) {
      // Its request did not come whole in time: reset (no call was made).
      Forget(it->second);
      it->second.refused = true;
      nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, due.stream, NGHTTP2_CANCEL);
    }
  }
  if (!ping_sent_ && now - last_read_ >= options_.ping_interval) {
    ping_sent_ = now;
    nghttp2_submit_ping(session_, NGHTTP2_FLAG_NONE, nullptr);
  }
  return true;
}

SteadyTime GrpcH2Session::NextTick() {
  // The deadlines of calls answered or reset meanwhile wake nobody.
  while (!deadlines_.empty()) {
    const auto it = streams_.find(deadlines_.top().stream);
    if (it != streams_.end() && !it->second.answered &&
        !(deadlines_.top().whole && (it->second.dispatched || it->second.refused))) {
      break;
    }
    deadlines_.pop();
  }
  SteadyTime next = ping_sent_ ? *ping_sent_ + options_.ping_timeout
                               : std::max(now_, last_read_ + options_.ping_interval);
  if (!preface_seen_) {
    next = std::min(next, started_ + options_.preface_timeout);
  }
  if (!deadlines_.empty()) {
    next = std::min(next, deadlines_.top().at);
  }
  return next;
}

}  // namespace sluice::server
