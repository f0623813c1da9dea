// The server's decisions never wait on a thread: the service, the HTTP API and the gRPC API
// over a store that answers later, from a thread of its own (as RedisStore does). Labelled
// concurrent: it also runs under ThreadSanitizer.

#include <atomic>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

#include "server/grpc/envoy_service.h"
#include "server/http/api.h"
#include "server/service/service.h"
#include "sluice/memory_store.h"
#include "tests/testing/grpc.h"
#include "tests/testing/rules.h"
#include "tests/testing/timers.h"
#include "tests/testing/util.h"

namespace sluice::server {
namespace {

namespace http = boost::beast::http;
namespace rls = envoy::service::ratelimit::v3;
using ::sluice::testing::At;
using ::sluice::testing::kEpoch;
using namespace std::chrono_literals;  // NOLINT(google-build-using-namespace)

constexpr int64_t kMinute = 60'000'000;
constexpr int64_t kStart = kEpoch + kMinute - kEpoch % kMinute;

// Every mode, so that a request may need one, two or three store calls in turn.
constexpr char kRules[] = R"(
domain: api
pools:
  spare: {requests_per_unit: 3, unit: minute}
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: plan
    limits:
      - {requests_per_unit: 2, unit: second}
      - {requests_per_unit: 4, unit: minute, name: plan_minute}
  - key: soft
    mode: soft
    soft_percent: 50
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: job
    mode: elastic
    pool: spare
    rate_limit: {algorithm: gcra, requests_per_unit: 1, period: 10s}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
)";

// A store that holds every DecideAllAsync until the test answers it, then decides it in a
// MemoryStore: the answer comes later and, when the test wishes, from another thread. The
// synchronous calls fail the test: the server must never use them.
class DeferredStore final : public Store {
 public:
  absl::StatusOr<Decision> Decide(const Limit& limit, std::string_view key, int64_t cost,
                                  Timestamp now) override {
    ADD_FAILURE() << "the synchronous Decide was called";
    return memory_.Decide(limit, key, cost, now);
  }
  absl::StatusOr<Decision> DecideAll(std::span<const LimitedKey> requests, int64_t cost,
                                     Timestamp now, std::span<Decision> each) override {
    ADD_FAILURE() << "the synchronous DecideAll was called";
    return memory_.DecideAll(requests, cost, now, each);
  }
  void DecideAllAsync(std::span<const LimitedKey> requests, int64_t cost, Timestamp now,
                      std::span<Decision> each, DecideDone done) override {
    auto call = std::make_unique<Call>();
    for (const LimitedKey& r : requests) {
      call->limits.push_back(*r.limit);
      call->keys.emplace_back(r.key);
    }
    call->cost = cost;
    call->now = now;
    call->each = each;
    call->done = std::move(done);
    std::lock_guard lock(mutex_);
    calls_.push_back(std::move(call));
    ++received_;
    changed_.notify_all();
  }
  // Leases are not held back: answered at once by the memory store.
  absl::StatusOr<Decision> LeaseAll(LeaseOp op, std::span<const LeasedKey> keys,
                                    std::string_view id, Micros ttl, Timestamp now,
                                    std::span<Decision> each) override {
    return memory_.LeaseAll(op, keys, id, ttl, now, each);
  }
  absl::Status CheckLimit(const Limit& limit) const override { return memory_.CheckLimit(limit); }

  // Calls held now, and received in all.
  size_t held() {
    std::lock_guard lock(mutex_);
    return calls_.size();
  }
  size_t received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

  // Waits until `n` calls are held; false after 60 s (a watchdog).
  bool AwaitHeld(size_t n) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(60), [&] { return calls_.size() >= n; });
  }

  // Answers the oldest call held, on this thread: decided by the memory store, or `failure`.
  // False when none is held.
  bool AnswerOne(std::optional<absl::Status> failure = std::nullopt) {
    std::unique_ptr<Call> call;
    {
      std::lock_guard lock(mutex_);
      if (calls_.empty()) {
        return false;
      }
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    if (failure) {
      std::move(call->done)(*failure);
      return true;
    }
    std::vector<LimitedKey> requests;
    for (size_t i = 0; i < call->limits.size(); ++i) {
      requests.push_back({&call->limits[i], call->keys[i]});
    }
    std::move(call->done)(memory_.DecideAll(requests, call->cost, call->now, call->each));
    return true;
  }

 private:
  struct Call {
    std::vector<Limit> limits;
    std::vector<std::string> keys;
    int64_t cost = 0;
    Timestamp now;
    std::span<Decision> each;
    DecideDone done;
  };
  MemoryStore memory_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<Call>> calls_;
  size_t received_ = 0;
};

// Answers every call the store holds, on a thread of its own, until destroyed.
class Answerer {
 public:
  explicit Answerer(DeferredStore& store)
      : thread_([this, &store] {
          while (!stop_.load()) {
            if (!store.AnswerOne()) {
              std::this_thread::sleep_for(std::chrono::microseconds(50));
            }
          }
          while (store.AnswerOne()) {
          }
        }) {}
  ~Answerer() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

CheckRequest Request(std::vector<std::pair<std::string, std::string>> descriptors,
                     int64_t cost = 1) {
  CheckRequest request{.domain = "api", .cost = cost};
  for (auto& [key, value] : descriptors) {
    request.descriptors.push_back({.entries = {{key, value}}});
  }
  return request;
}

// What a test compares of a result: each limit's name and decision, and the combined one.
std::string Summary(const absl::StatusOr<CheckResult>& result) {
  if (!result.ok()) {
    return result.status().ToString();
  }
  std::string out =
      fmt::format("allowed {} remaining {} retry {} reset {}:", result->combined.allowed,
                  result->combined.remaining, result->combined.retry_after.count(),
                  result->combined.reset_after.count());
  for (const LimitOutcome& l : result->limits) {
    out += fmt::format(" [{} {} {} {}{}{}]", l.name, l.decision.allowed, l.decision.remaining,
                       l.decision.retry_after.count(), l.borrowed ? " borrowed" : "",
                       l.over_soft ? " over_soft" : "");
  }
  return out;
}

std::string Summary(const absl::StatusOr<std::vector<DescriptorResult>>& results) {
  if (!results.ok()) {
    return results.status().ToString();
  }
  std::string out;
  for (const DescriptorResult& r : *results) {
    out += fmt::format("[{} {} {} {}]", r.matched, r.over_limit, r.limit_remaining,
                       r.until_reset.count());
  }
  return out;
}

class AsyncServiceTest : public ::testing::Test {
 protected:
  AsyncServiceTest()
      : clock_(At(kStart)),
        service_(store_, clock_, metrics_),
        reference_service_(reference_store_, clock_, reference_metrics_) {
    service_.SetRules(testing::MustParseRules(kRules, metrics_.rules(), store_));
    reference_service_.SetRules(
        testing::MustParseRules(kRules, reference_metrics_.rules(), reference_store_));
  }

  const RuleCounters& Counters(const std::string& name) { return *metrics_.rules().Get(name); }

  DeferredStore store_;
  ManualClock clock_;
  Metrics metrics_;
  RateLimitService service_;
  // The same rules over a MemoryStore, decided synchronously: what every answer must equal.
  MemoryStore reference_store_;
  Metrics reference_metrics_;
  RateLimitService reference_service_;
};

TEST_F(AsyncServiceTest, CheckReturnsBeforeTheStoreAnswersAndIsAnsweredFromItsThread) {
  std::optional<absl::StatusOr<CheckResult>> result;
  std::thread::id answered_on;
  service_.CheckAsync(Request({{"user", "alice"}}), [&](absl::StatusOr<CheckResult> r) {
    answered_on = std::this_thread::get_id();
    result = std::move(r);
  });
  EXPECT_FALSE(result.has_value());
  ASSERT_EQ(store_.held(), 1U);

  std::thread answering([&] { store_.AnswerOne(); });
  const std::thread::id answering_id = answering.get_id();
  answering.join();
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(answered_on, answering_id);
  EXPECT_EQ(Summary(*result), Summary(reference_service_.Check(Request({{"user", "alice"}}))));
}

// An elastic limit that denies, then its pool, then a shadow limit: three store calls, each
// sent only once the one before has answered.
TEST_F(AsyncServiceTest, StoreCallsOfOneRequestGoOneAfterAnother) {
  const CheckRequest request = Request({{"job", "nightly"}, {"shadow", "nightly"}});
  for (int i = 0; i < 3; ++i) {
    std::optional<absl::StatusOr<CheckResult>> result;
    service_.CheckAsync(request, [&](absl::StatusOr<CheckResult> r) { result = std::move(r); });
    // The first request fits job's own limit: enforced, then shadow. Later ones borrow:
    // enforced (denied), pooled, then shadow.
    const size_t calls = i == 0 ? 2 : 3;
    for (size_t call = 0; call < calls; ++call) {
      ASSERT_FALSE(result.has_value()) << "request " << i << " after " << call << " answers";
      ASSERT_EQ(store_.held(), 1U) << "request " << i << " call " << call;
      std::thread([&] { store_.AnswerOne(); }).join();
    }
    ASSERT_TRUE(result.has_value()) << "request " << i;
    EXPECT_EQ(store_.held(), 0U);
    EXPECT_EQ(Summary(*result), Summary(reference_service_.Check(request))) << "request " << i;
  }
  EXPECT_EQ(Counters("api.job").borrowed.load(), 2);
}

TEST_F(AsyncServiceTest, AStoreFailureEndsTheRequestWithItsError) {
  std::optional<absl::StatusOr<CheckResult>> result;
  service_.CheckAsync(Request({{"user", "alice"}}),
                      [&](absl::StatusOr<CheckResult> r) { result = std::move(r); });
  ASSERT_TRUE(store_.AnswerOne(absl::UnavailableError("redis: connection refused")));
  ASSERT_TRUE(result.has_value());
  EXPECT_EQ(result->status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(store_.held(), 0U) << "no further store call after a failure";
  EXPECT_NE(metrics_.Render().find("sluice_store_errors_total 1\n"), std::string::npos);
}

// The failures' line is said at most every 10 s of the server's (wall) clock: a step back of
// that clock is no reason for silence. Before, after a step back of an hour no line was said
// for an hour.
TEST_F(AsyncServiceTest, AStoreFailureIsSaidAfterTheClockStepsBack) {
  std::ostringstream log;
  const std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "store-failures", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  auto fail = [&] {
    service_.CheckAsync(Request({{"user", "alice"}}), [](absl::StatusOr<CheckResult>) {});
    EXPECT_TRUE(store_.AnswerOne(absl::UnavailableError("redis: connection refused")));
  };
  fail();
  fail();  // Within 10 s of the first line: counted, not said.
  clock_.Advance(-Micros(3'600'000'000));
  fail();
  spdlog::set_default_logger(before);
  const std::string lines = log.str();
  EXPECT_NE(lines.find("the store failed 1 decision(s); the last"), std::string::npos) << lines;
  EXPECT_NE(lines.find("the store failed 2 decision(s) since the last such line"),
            std::string::npos)
      << lines;
}

// Random requests of every kind, each answered from another thread, equal the synchronous
// service's answers over a MemoryStore, one for one.
TEST_F(AsyncServiceTest, RandomRequestsMatchTheSynchronousService) {
  std::mt19937_64 random(testing::Seed(7));
  const std::vector<std::string> keys = {"user", "plan", "soft",   "shadow",
                                         "job",  "free", "banned", "none"};
  Answerer answerer(store_);
  for (int i = 0; i < 2000; ++i) {
    clock_.Advance(Micros(static_cast<int64_t>(random() % 400'000)));
    CheckRequest request{.domain = "api", .cost = static_cast<int64_t>(random() % 3)};
    const size_t descriptors = 1 + random() % 3;
    for (size_t d = 0; d < descriptors; ++d) {
      request.descriptors.push_back(
          {.entries = {{keys[random() % keys.size()], fmt::format("v{}", random() % 3)}}});
    }
    switch (random() % 3) {
      case 0: {
        std::promise<absl::StatusOr<CheckResult>> answer;
        service_.CheckAsync(request,
                            [&](absl::StatusOr<CheckResult> r) { answer.set_value(std::move(r)); });
        ASSERT_EQ(Summary(answer.get_future().get()), Summary(reference_service_.Check(request)))
            << "request " << i;
        break;
      }
      case 1: {
        std::promise<absl::StatusOr<std::vector<DescriptorResult>>> answer;
        service_.ShouldRateLimitAsync(request,
                                      [&](absl::StatusOr<std::vector<DescriptorResult>> r) {
                                        answer.set_value(std::move(r));
                                      });
        ASSERT_EQ(Summary(answer.get_future().get()),
                  Summary(reference_service_.ShouldRateLimit(request)))
            << "request " << i;
        break;
      }
      default: {
        const AdHocRequest adhoc{.key = fmt::format("k{}", random() % 4),
                                 .spec = {.algorithm = static_cast<Algorithm>(random() % 7),
                                          .limit = 3,
                                          .period = Micros{1'000'000}},
                                 .cost = request.cost};
        std::promise<absl::StatusOr<CheckResult>> answer;
        service_.CheckAdHocAsync(
            adhoc, [&](absl::StatusOr<CheckResult> r) { answer.set_value(std::move(r)); });
        ASSERT_EQ(Summary(answer.get_future().get()), Summary(reference_service_.CheckAdHoc(adhoc)))
            << "request " << i;
      }
    }
  }
}

// Many requests in flight at once from several threads, answered from another: exactly the
// limit is admitted, and WaitIdle returns only once every answer has been delivered.
TEST_F(AsyncServiceTest, ManyInFlightAdmitExactlyTheLimit) {
  constexpr int kThreads = 4;
  constexpr int kEach = 100;
  std::atomic<int> admitted{0};
  std::atomic<int> answered{0};
  {
    std::vector<std::thread> callers;
    for (int t = 0; t < kThreads; ++t) {
      callers.emplace_back([&] {
        for (int i = 0; i < kEach; ++i) {
          service_.CheckAsync(Request({{"user", "crowd"}}), [&](absl::StatusOr<CheckResult> r) {
            if (r.ok() && r->combined.allowed) {
              admitted.fetch_add(1);
            }
            answered.fetch_add(1);
          });
        }
      });
    }
    for (std::thread& caller : callers) {
      caller.join();
    }
  }
  EXPECT_EQ(store_.held(), static_cast<size_t>(kThreads * kEach)) << "all in flight at once";
  std::atomic<bool> idle{false};
  std::thread waiter([&] {
    service_.WaitIdle();
    idle.store(true);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(idle.load()) << "WaitIdle returned with every decision outstanding";
  {
    Answerer answerer(store_);
    waiter.join();
  }
  EXPECT_TRUE(idle.load());
  EXPECT_EQ(answered.load(), kThreads * kEach);
  EXPECT_EQ(admitted.load(), 3);
}

// The HTTP API hands its answer over when the store answers: Handle returns first.
TEST_F(AsyncServiceTest, HttpHandleReturnsBeforeTheStoreAnswers) {
  HttpApi api(service_, metrics_, clock_, nullptr);
  HttpRequest request{http::verb::post, "/v1/check", 11};
  request.body() =
      R"({"domain": "api", "descriptors": [{"entries": [{"key": "user", "value": "bob"}]}]})";
  request.prepare_payload();
  std::optional<HttpApi::Build> build;
  api.Handle(request, "192.0.2.1", [&](HttpApi::Build b) { build = std::move(b); });
  EXPECT_FALSE(build.has_value());
  ASSERT_EQ(store_.held(), 1U);
  std::thread([&] { store_.AnswerOne(); }).join();
  ASSERT_TRUE(build.has_value());
  const HttpResponse response = std::move(*build)();
  EXPECT_EQ(response.result(), http::status::ok);
  EXPECT_EQ(response["RateLimit"], R"("api.user";r=2;t=60)") << response.body();
}

// gRPC: 64 calls wait for the store at once (none holds a gRPC thread), then all complete.
TEST_F(AsyncServiceTest, GrpcCallsWaitForTheStoreTogether) {
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
  // Debian's gRPC is not built for ThreadSanitizer: with client and server in one process, the
  // synchronisation inside gRPC is invisible to it and every call is reported as a race.
  GTEST_SKIP() << "gRPC in-process under ThreadSanitizer (the release and ASan runs cover it)";
#endif
#endif
  EnvoyGrpcService envoy(service_, {});
  absl::StatusOr<testing::LocalGrpc> grpc = testing::StartLocalGrpc(envoy);
  ASSERT_TRUE(grpc.ok()) << grpc.status();
  auto& stub = grpc->stub;
  constexpr int kCalls = 64;
  std::vector<std::thread> clients;
  std::atomic<int> ok{0};
  for (int i = 0; i < kCalls; ++i) {
    clients.emplace_back([&, i] {
      rls::RateLimitRequest request;
      request.set_domain("api");
      auto* entry = request.add_descriptors()->add_entries();
      entry->set_key("user");
      entry->set_value(fmt::format("u{}", i));
      rls::RateLimitResponse response;
      grpc::ClientContext context;
      if (stub->ShouldRateLimit(&context, request, &response).ok() &&
          response.overall_code() == rls::RateLimitResponse::OK) {
        ok.fetch_add(1);
      }
    });
  }
  EXPECT_TRUE(store_.AwaitHeld(kCalls)) << "only " << store_.held() << " calls reached the store";
  {
    Answerer answerer(store_);
    for (std::thread& client : clients) {
      client.join();
    }
  }
  EXPECT_EQ(ok.load(), kCalls);
  grpc->server.Shutdown(Micros{0});
}

// POST /v1/acquire's waits on real timers (a thread of their own), with requests and
// cancellations arriving from several threads at once: each gets exactly one answer, the
// line empties, and the admissions are exactly what the queue allowed. (Under TSan, this is
// the race check of WaitLines.) The seed is printed per thread by testing::Seed.
// An acquire whose client goes while the store decides its rate limit, after its lease was
// taken: the lease goes back at once rather than hold the slot for lease_ttl.
TEST(AcquireLeaseTest, AWaiterGoneWhileTheStoreDecidesGivesItsLeaseBack) {
  DeferredStore store;
  ManualClock clock(At(kStart));
  Metrics metrics;
  testing::ManualTimers timers;
  RateLimitService service(store, clock, metrics, &timers);
  service.SetRules(testing::MustParseRules(R"(
domain: jobs
descriptors:
  - key: export
    concurrency: 1
    rate_limit: {unit: second, requests_per_unit: 5}
)",
                                           metrics.rules(), store));
  const CheckRequest exporter{.domain = "jobs", .descriptors = {{.entries = {{"export", "x"}}}}};
  std::optional<absl::StatusOr<AcquireResult>> answer;
  RateLimitService::CancelWait cancel = service.AcquireAsync(
      {.check = exporter, .max_wait = 5s},
      [&](absl::StatusOr<AcquireResult> result) { answer = std::move(result); });
  ASSERT_TRUE(store.AwaitHeld(1));  // The probe's rate limit (cost 0).
  ASSERT_TRUE(store.AnswerOne());
  ASSERT_TRUE(store.AwaitHeld(1));  // The try's rate limit, its lease taken already.
  const std::string key = RuleKey("jobs", {{"export", "x"}});
  const LeasedKey leased{.key = key, .capacity = 1};
  Decision each;
  EXPECT_EQ(
      store.LeaseAll(LeaseOp::kQuery, {&leased, 1}, "", 1s, clock.Now(), {&each, 1})->remaining, 0);
  cancel();
  ASSERT_TRUE(store.AnswerOne());
  timers.RunUntil(clock, clock.Now());
  ASSERT_TRUE(answer.has_value());
  EXPECT_EQ(answer->status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(
      store.LeaseAll(LeaseOp::kQuery, {&leased, 1}, "", 1s, clock.Now(), {&each, 1})->remaining, 1);
  EXPECT_EQ(service.waiting(), 0U);
}

TEST(AcquireConcurrencyTest, WaitersAndCancellationsFromManyThreads) {
  MemoryStore store;
  Metrics metrics;
  AsioTimers timers;
  RateLimitService service(store, SystemClock(), metrics, &timers);
  constexpr int kThreads = 4;
  constexpr int kPerThread = 25;
  // 1,000 per second one at a time: 100 waiters go through in about 0.1 s.
  const AdHocRequest queue{
      .key = "q",
      .spec = {.algorithm = Algorithm::kLeakyBucket, .limit = 1000, .period = 1s, .burst = 1}};
  std::atomic<int> answers{0};
  std::atomic<int> admitted{0};
  std::atomic<int> cancelled{0};
  std::atomic<int> twice{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 random(static_cast<uint32_t>(testing::Seed(20261122) + t));
      std::vector<RateLimitService::CancelWait> cancels;
      for (int i = 0; i < kPerThread; ++i) {
        auto done = std::make_shared<std::atomic<bool>>(false);
        cancels.push_back(service.AcquireAsync(
            {.check = queue, .max_wait = 10s}, [&, done](absl::StatusOr<AcquireResult> result) {
              if (done->exchange(true)) {
                twice.fetch_add(1);
              }
              answers.fetch_add(1);
              if (result.ok() && result->check.combined.allowed) {
                admitted.fetch_add(1);
              } else if (result.status().code() == absl::StatusCode::kCancelled) {
                cancelled.fetch_add(1);
              }
            }));
        if (random() % 3 == 0) {
          const size_t which = random() % cancels.size();
          cancels[which]();  // Perhaps answered already: then it does nothing.
        }
      }
    });
  }
  for (std::thread& thread : threads) {
    thread.join();
  }
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (answers.load() < kThreads * kPerThread && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(1ms);
  }
  service.WaitIdle();
  EXPECT_EQ(answers.load(), kThreads * kPerThread);
  EXPECT_EQ(twice.load(), 0);
  EXPECT_GT(cancelled.load(), 0);
  EXPECT_EQ(admitted.load() + cancelled.load(), kThreads * kPerThread);
  EXPECT_GT(admitted.load(), 0);
  EXPECT_EQ(service.waiting(), 0U);
  // Every waiter is answered well before its max_wait (10 s) ends: the timers of those ends
  // were cancelled, none is left to run (cancellations reach the timers' thread shortly).
  const auto settle = std::chrono::steady_clock::now() + 60s;
  while (timers.pending() > 0 && std::chrono::steady_clock::now() < settle) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(timers.pending(), 0U);
}

}  // namespace
}  // namespace sluice::server
