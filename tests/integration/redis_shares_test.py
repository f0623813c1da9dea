#!/usr/bin/env python3
"""Quota leasing through sluiced: three servers with --redis-shares on one redis-server, one
hot key of a rule with `share:`, hammered over HTTP. The fleet admits at most the limit and at
least the limit less what each server may hold unused (1.5 x max), and answers some requests
from shares (its metrics say how many). A rule leasing sliding_log is refused at start with
its line. Python 3 standard library only.

    python3 tests/integration/redis_shares_test.py --sluiced build/bin/sluiced
"""

import os
import subprocess
import threading

import sluiced
from redis_test import RedisCase, main, metric

LIMIT, MAX, SERVERS = 300, 20, 3

RULES = f"""
domain: hot
descriptors:
  - key: user
    rate_limit: {{unit: hour, requests_per_unit: {LIMIT}, share: {{max: {MAX}, ttl: 10s}}}}
"""

LEASED_LOG = """
domain: hot
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log,
                 share: {max: 2, ttl: 1s}}
"""


class RedisSharesTest(RedisCase):
    rules = RULES

    def test_three_servers_share_one_hot_key_within_the_bound(self):
        # One window of an hour holds the whole run: do not start it in the hour's last minute.
        sluiced.away_from_edge(3600, 60)
        for _ in range(SERVERS):
            self.start("--redis-shares")
        self.assertIn("shares on", self.servers[0].output())
        admitted = []
        lock = threading.Lock()

        def hammer(server):
            mine = 0
            for _ in range(150):
                status, _ = server.check("ann", domain="hot")
                self.assertIn(status, (200, 429))
                mine += status == 200
            with lock:
                admitted.append(mine)

        threads = [threading.Thread(target=hammer, args=(server,))
                   for server in self.servers for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = sum(admitted)
        self.assertLessEqual(total, LIMIT)
        self.assertGreaterEqual(total, LIMIT - SERVERS * MAX * 3 // 2)
        local = sum(metric(server, "sluice_redis_share_decisions_total")
                    for server in self.servers)
        self.assertGreater(local, 0)

    def test_a_share_on_sliding_log_is_refused_at_start(self):
        bad = os.path.join(self.workdir, "bad.yaml")
        with open(bad, "w") as f:
            f.write(LEASED_LOG)
        result = subprocess.run(
            [sluiced.BINARY, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--config", bad,
             "--store", self.redis.url, "--redis-shares"],
            capture_output=True, text=True, timeout=30)
        self.assertNotEqual(result.returncode, 0)
        output = result.stdout + result.stderr
        self.assertIn("bad.yaml:6:", output)
        self.assertIn("sliding_log cannot be leased", output)


if __name__ == "__main__":
    main()
