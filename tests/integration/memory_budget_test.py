#!/usr/bin/env python3
"""sluiced's memory store under load, through HTTP (issue 19, findings 2 and 4; issue 23):

- with --max-keys 1000, a flood of new keys each driven over its own limit never frees a
  limited victim: the victim stays denied, the keys past the bound are refused (503, store
  full) and counted in sluice_store_refused_total;
- with --max-leases 50, a flood of leases on new keys holds at most 50, the rest refused (503)
  and counted, the gauge sluice_store_leases showing what is held;
- with --memory-compact-keys (fingerprints for gcra and leaky_bucket keys, issue 23), each of
  many users still gets exactly its limit, apart from the others, beside a fixed_window rule
  whose keys are kept as text.

    python3 tests/integration/memory_budget_test.py --sluiced build/bin/sluiced

Python 3 standard library only.
"""

import http.client
import json
import unittest

import sluiced

RULES = """
domain: flood
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: job
    concurrency: 1000
    lease_ttl: 1h
  - key: paced
    rate_limit: {algorithm: gcra, unit: day, requests_per_unit: 3}
  - key: queued
    rate_limit: {algorithm: leaky_bucket, unit: day, requests_per_unit: 2}
"""


class Client:
    """One kept-alive connection: thousands of requests in a few seconds."""

    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)

    def check(self, key, value):
        body = json.dumps({"domain": "flood", "descriptors": [{"entries": [
            {"key": key, "value": value}]}]})
        self.conn.request("POST", "/v1/check", body, {"Content-Type": "application/json"})
        response = self.conn.getresponse()
        return response.status, response.read().decode()

    def close(self):
        self.conn.close()


class MemoryBudgetTest(unittest.TestCase):
    def start(self, *flags):
        self.server = sluiced.Sluiced.with_rules(RULES, *flags)
        self.server.start()
        self.addCleanup(self.server.cleanup)
        self.client = Client(self.server.port)
        self.addCleanup(self.client.close)

    def test_a_flood_of_denied_keys_never_frees_a_limited_victim(self):
        self.start("--max-keys", "1000")
        self.assertEqual(self.client.check("user", "victim")[0], 200)
        self.assertEqual(self.client.check("user", "victim")[0], 429)
        statuses = {}
        victim = []
        for k in range(2500):
            for _ in range(2):  # Admitted, then denied: each flood key "has been denied" too.
                status, body = self.client.check("user", f"flood-{k}")
                statuses[status] = statuses.get(status, 0) + 1
                if status == 503:
                    self.assertIn("memory store is full", body)
            if k % 25 == 0:
                victim.append(self.client.check("user", "victim")[0])
        self.assertEqual(set(victim), {429}, f"the victim's answers during the flood: {victim}")
        self.assertEqual(set(statuses), {200, 429, 503}, statuses)
        metrics = self.server.metrics()
        self.assertGreater(self.server.metric("sluice_store_refused_total", metrics), 0)
        self.assertLessEqual(self.server.metric("sluice_store_keys", metrics), 1000 + 64)
        for _ in range(20):
            self.assertEqual(self.client.check("user", "victim")[0], 429)

    def test_a_flood_of_leases_holds_at_most_max_leases(self):
        self.start("--max-leases", "50")
        statuses = {}
        for k in range(200):
            status, body = self.client.check("job", f"job-{k}")
            statuses[status] = statuses.get(status, 0) + 1
            if status == 503:
                self.assertIn("--max-leases", body)
        self.assertEqual(statuses, {200: 50, 503: 150})
        metrics = self.server.metrics()
        self.assertEqual(self.server.metric("sluice_store_leases", metrics), 50)
        self.assertEqual(self.server.metric("sluice_store_leases_refused_total", metrics), 150)

    def test_compact_keys_give_each_key_exactly_its_limit(self):
        self.start("--memory-compact-keys")
        for k in range(300):
            for key, limit in (("paced", 3), ("queued", 2), ("user", 1)):
                got = [self.client.check(key, f"u-{k}")[0] for _ in range(limit + 1)]
                self.assertEqual(got, [200] * limit + [429], f"{key} u-{k}")
        # 900 keys in all, none lost or refused.
        metrics = self.server.metrics()
        self.assertEqual(self.server.metric("sluice_store_keys", metrics), 900)
        self.assertEqual(self.server.metric("sluice_store_refused_total", metrics), 0)

    def test_caller_limits_and_the_stores_tables_are_shown(self):
        self.start()
        before = self.server.metrics()
        self.assertEqual(self.server.metric("sluice_caller_limits_in_use", before), 0)
        for limit in (3, 4, 4):  # Two distinct limits given by callers.
            answer = self.server.request("POST", "/v1/check", {
                "key": "ann", "algorithm": "gcra", "limit": limit, "period": "1h"})
            self.assertEqual(answer.status, 200, answer)
        after = self.server.metrics()
        self.assertEqual(self.server.metric("sluice_caller_limits_in_use", after), 2)
        self.assertEqual(self.server.metric("sluice_store_limits", after),
                         self.server.metric("sluice_store_limits", before) + 2)
        self.assertEqual(self.server.metric("sluice_store_limits_retired_total", after), 0)


if __name__ == "__main__":
    sluiced.main()
