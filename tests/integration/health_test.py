#!/usr/bin/env python3
"""What sluiced says of its health (issue 20): /healthz names the store and its state, 200
while decisions can be made (Redis up; or lost under --redis-on-failure allow or local, whose
policy decides: "degraded"), 503 when they cannot (Redis lost under deny); envoyproxy/
ratelimit's /healthcheck agrees (500 where /healthz is 503). One log line when Redis is lost
(and at most one more when its cause changes) and one when it is back, with no request made
meanwhile. Python 3 standard library only.

    python3 tests/integration/health_test.py --sluiced build/bin/sluiced
"""

import json
import time

import sluiced
from redis_test import RedisCase, main


def eventually(probe, expected, what, seconds=30):
    """probe() once it returns `expected`, or the last value after `seconds` (a watchdog: the
    store learns of a stopped Redis on its own thread, after its backoff)."""
    deadline = time.monotonic() + seconds
    value = probe()
    while value != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        value = probe()
    return value


def assert_said_lost_and_back_once(test, server, who, context):
    """`server`'s log said `who` ("Redis at HOST:PORT") lost once and back once. A change of
    cause may be said once more (the connection closed, then refused): never a line per
    reconnection, call or probe."""
    log = server.output()
    test.assertEqual(log.count(f"{who} lost:"), 1, (context, log))
    test.assertEqual(log.count(f"{who} is back after"), 1, (context, log))
    test.assertLessEqual(log.count(f"{who} is still lost"), 1, (context, log))


class HealthTest(RedisCase):
    def healthz(self, server):
        """(status, body) of GET /healthz."""
        response = server.request("GET", "/healthz")
        return response.status, json.loads(response.body)

    def healthcheck(self, server):
        response = server.request("GET", "/healthcheck")
        return response.status, response.body.decode()

    def state(self, server):
        """What /healthz and /healthcheck say, in short."""
        status, body = self.healthz(server)
        return (status, body["status"], body.get("redis"), self.healthcheck(server)[0])

    def test_memory_store_is_always_healthy(self):
        server = sluiced.Sluiced(self.workdir)
        self.servers.append(server)
        self.assertEqual(self.healthz(server), (200, {"status": "ok", "store": "memory"}))
        self.assertEqual(self.healthcheck(server), (200, "OK"))

    def test_redis_stopped_each_policy(self):
        deny = self.start("--redis-timeout", "1s")
        allow = self.start("--redis-on-failure", "allow")
        local = self.start("--redis-on-failure", "local")
        servers = {"deny": deny, "allow": allow, "local": local}
        for policy, server in servers.items():
            self.assertEqual(eventually(lambda: self.state(server), (200, "ok", "up", 200), policy),
                             (200, "ok", "up", 200), policy)
            self.assertEqual(self.healthz(server)[1],
                             {"status": "ok", "store": "redis", "mode": "single", "redis": "up",
                              "on_failure": policy})

        self.redis.stop()  # No request is made: the store sees it on its own.
        self.assertEqual(eventually(lambda: self.state(deny), (503, "unavailable", "lost", 500),
                                    "deny"), (503, "unavailable", "lost", 500))
        status, body = self.healthz(deny)
        self.assertIn("1 Redis server(s) lost", body["error"])
        self.assertIn("1 Redis server(s) lost", self.healthcheck(deny)[1])
        for policy in ("allow", "local"):  # The policy decides: degraded, still 200.
            self.assertEqual(
                eventually(lambda: self.state(servers[policy]), (200, "degraded", "lost", 200),
                           policy), (200, "degraded", "lost", 200))
        # And it does decide as /healthz says: deny fails, allow admits.
        self.assertEqual(deny.check("ann", domain="fleet")[0], 503)
        self.assertEqual(allow.check("ann", domain="fleet")[0], 200)
        self.assertEqual(local.check("ann", domain="fleet")[0], 200)

        self.redis.start()
        for policy, server in servers.items():
            self.assertEqual(eventually(lambda: self.state(server), (200, "ok", "up", 200),
                                        policy, seconds=60), (200, "ok", "up", 200))
        for policy, server in servers.items():
            assert_said_lost_and_back_once(self, server, f"Redis at 127.0.0.1:{self.redis.port}",
                                           policy)


if __name__ == "__main__":
    main()
