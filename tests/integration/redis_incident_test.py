#!/usr/bin/env python3
"""sluiced on a Redis in an incident: out of memory (OOM) or demoted to a replica (READONLY),
Redis answers every call but cannot decide it; each --redis-on-failure policy answers as it
says (deny: 503 naming the cause; allow: 200; local: the rule, in the process), and service
resumes when Redis can decide again. What sluiced logs meanwhile: Redis lost with the cause,
and back, once each; an AUTH refused names Redis's error. Python 3 standard library only.

    python3 tests/integration/redis_incident_test.py --sluiced build/bin/sluiced
"""

import socket
import time

import sluiced
from redis_test import Redis, RedisCase, main


def redis_command(port, *args):
    """Runs one command on the redis-server at `port`; its reply's first line."""
    frame = b"*%d\r\n" % len(args)
    for arg in args:
        arg = str(arg).encode()
        frame += b"$%d\r\n%s\r\n" % (len(arg), arg)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(frame)
        return s.recv(4096).split(b"\r\n")[0].decode()


class RedisIncidentTest(RedisCase):
    def policies(self):
        """Three servers, one per policy, each having decided once."""
        servers = (self.start("--redis-timeout", "1s"),
                   self.start("--redis-on-failure", "allow"),
                   self.start("--redis-on-failure", "local"))
        for server in servers:
            self.assertEqual(server.check("warm", domain="fleet")[0], 200)
        return servers

    def expect_the_policies(self, servers, user, cause):
        deny, allow, local = servers
        status, answer = deny.check(user, domain="fleet")
        self.assertEqual(status, 503, answer)
        self.assertIn(cause, answer["error"])
        for _ in range(6):
            status, answer = allow.check(user, domain="fleet")
            self.assertEqual(status, 200, answer)  # Fail open.
        # Local: a limiter in the process with the same rule, 5 per hour, from scratch.
        statuses = [local.check(user, domain="fleet")[0] for _ in range(6)]
        self.assertEqual(statuses, [200] * 5 + [429])

    def expect_served_again(self, server, user):
        deadline = time.monotonic() + 120  # A watchdog: served again about a second later.
        while time.monotonic() < deadline:
            status, answer = server.check(user, domain="fleet")
            if status == 200:
                break
            time.sleep(0.02)
        self.assertEqual((status, answer.get("remaining")), (200, 4))

    def await_log(self, server, text):
        """`server`'s log once it holds `text` (the store says it on a thread of its own,
        after the answer that showed the change), or after 120 s (a watchdog)."""
        deadline = time.monotonic() + 120
        while text not in server.output() and time.monotonic() < deadline:
            time.sleep(0.02)
        log = server.output()
        self.assertIn(text, log)
        return log

    def test_out_of_memory_each_policy_answers(self):
        servers = self.policies()
        redis_command(self.redis.port, "CONFIG", "SET", "maxmemory-policy", "noeviction")
        self.assertEqual(redis_command(self.redis.port, "CONFIG", "SET", "maxmemory", "1"), "+OK")
        self.expect_the_policies(servers, "oom", "OOM")
        redis_command(self.redis.port, "CONFIG", "SET", "maxmemory", "0")
        self.expect_served_again(servers[0], "after")
        log = self.await_log(servers[0], "is back after")
        self.assertEqual(log.count("cannot decide: OOM command not allowed"), 1, log)
        self.assertEqual(log.count("is back after"), 1, log)

    def test_a_demoted_master_each_policy_answers(self):
        other = Redis(self.workdir)
        try:
            servers = self.policies()
            redis_command(self.redis.port, "REPLICAOF", "127.0.0.1", other.port)
            self.expect_the_policies(servers, "demoted", "READONLY")
            redis_command(self.redis.port, "REPLICAOF", "NO", "ONE")
            self.expect_served_again(servers[0], "promoted")
            self.assertIn("READONLY", self.await_log(servers[0], "is back after"))
        finally:
            other.stop()

    def test_an_auth_refused_is_logged_naming_redis_error(self):
        redis_command(self.redis.port, "CONFIG", "SET", "requirepass", "s3cret")
        server = sluiced.Sluiced(self.workdir, "--store",
                                 f"redis://:wrong@127.0.0.1:{self.redis.port}")
        self.servers.append(server)
        for _ in range(5):
            status, answer = server.check("ann", domain="fleet")
            self.assertEqual(status, 503, answer)
        log = self.await_log(server, "lost: Redis refused AUTH: WRONGPASS")
        # Once, not per reconnection (main also logs failed decisions, at a rate of its own).
        self.assertEqual(log.count("lost: Redis refused AUTH"), 1, log)
        self.assertNotIn("wrong@", log)


if __name__ == "__main__":
    main()
