#!/usr/bin/env python3
"""Blocks and POST /v1/reset across two sluiced on one redis-server (issue 33).

- A rule with `block: 30s` (gcra, 5 per 10 s, burst 5: its own retry never above 2 s, one
  unit's interval) exhausted on server A: server B answers 429 with the limit "blocked",
  retry_after at the block's end (at most 30 s, and above the limit's own 2 s) and Retry-After
  the same, counted in sluice_rule_blocked_total; the block holds however much the limit
  itself would admit by then.
- POST /v1/reset on B: 401 without Authorization, 403 with a wrong token (the block still
  there after both), 200 with the right one; then A admits again, the key as new.
- The same with an ad hoc limit with "block" (its reset names the ad hoc limit).
- A sluiced without --admin-token-file answers 403 on /v1/reset, the right token or none.

No elapsed time is asserted: retry_after is a figure of the answer. Python 3 standard library
only.

    python3 tests/integration/reset_blocks_test.py --sluiced build/bin/sluiced
"""

import shutil
import tempfile
import unittest

import sluiced
from redis_test import RedisCase
from settle_fixture import (ADMIN_TOKEN, admin, by_name, check_body, memory_server, post,
                            server_flags)

LIMIT, PERIOD_S, BLOCK_S = 5, 10, 30
INTERVAL_US = PERIOD_S * 1_000_000 // LIMIT  # gcra's emission interval: its longest retry.
RULES = f"""
domain: guard
descriptors:
  - key: login
    rate_limit: {{name: login, algorithm: gcra, requests_per_unit: {LIMIT}, period: {PERIOD_S}s,
                 burst: {LIMIT}, block: {BLOCK_S}s}}
"""
ADHOC = {"key": "adhoc-mia", "algorithm": "gcra", "limit": LIMIT, "period": f"{PERIOD_S}s",
         "burst": LIMIT, "block": f"{BLOCK_S}s"}


class ResetBlocksTest(RedisCase):
    rules = RULES

    def exhaust(self, server, body):
        """Checks on `server` until one is denied (a gcra of 5 per 10 s is denied once 6 come
        within 2 s, or a little more; 200 tries at most): the denial's answer."""
        for _ in range(200):
            status, answer, _ = post(server, "/v1/check", body)
            if status == 429:
                return answer
            self.assertEqual(status, 200, answer)
        self.fail("never denied")

    def assertBlocked(self, server, body, name):
        status, answer, headers = post(server, "/v1/check", body)
        self.assertEqual(status, 429, answer)
        limit = by_name(answer)[name]
        self.assertIs(limit.get("blocked"), True, answer)
        # At the block's end: at most the block, and past any retry the limit itself gives.
        for retry in (answer["retry_after_us"], limit["retry_after_us"]):
            self.assertLessEqual(retry, BLOCK_S * 1_000_000, answer)
            self.assertGreater(retry, INTERVAL_US, answer)
        retry_header = int(headers["Retry-After"])
        self.assertLessEqual(retry_header, BLOCK_S)
        self.assertGreater(retry_header, INTERVAL_US // 1_000_000)
        return answer

    def assertResetAcrossServers(self, a, b, check, reset, name):
        denial = self.exhaust(a, check)
        # The denial that started the block answers its end too.
        self.assertGreater(denial["retry_after_us"], INTERVAL_US, denial)
        blocked_before = b.metric(f'sluice_rule_blocked_total{{rule="{name}"}}') or 0
        self.assertBlocked(b, check, name)
        self.assertBlocked(b, {**check, "cost": 0}, name)  # Even a query.
        self.assertEqual(b.metric(f'sluice_rule_blocked_total{{rule="{name}"}}'),
                         blocked_before + 2)

        refused = b.metric("sluice_admin_refused_total") or 0
        status, answer, _ = post(b, "/v1/reset", reset)
        self.assertEqual(status, 401, answer)
        self.assertIn("Authorization", answer["error"])
        for wrong in ("wrong-token-0123456789", ADMIN_TOKEN[:-1], ADMIN_TOKEN + "x",
                      ADMIN_TOKEN.upper()):
            status, answer, _ = post(b, "/v1/reset", reset, admin(wrong))
            self.assertEqual(status, 403, (wrong, answer))
            self.assertIn("wrong", answer["error"])
        status, answer, _ = post(b, "/v1/reset", reset, {"Authorization": ADMIN_TOKEN})
        self.assertIn(status, (401, 403), answer)  # Not a bearer token.
        self.assertEqual(b.metric("sluice_admin_refused_total"), refused + 6)
        self.assertBlocked(a, check, name)  # Refused resets changed nothing.

        resets = b.metric("sluice_resets_total") or 0
        status, answer, _ = post(b, "/v1/reset", reset, admin())
        self.assertEqual((status, answer), (200, {"reset": True, "limits": [{"name": name}]}))
        self.assertEqual(b.metric("sluice_resets_total"), resets + 1)
        # The key starts afresh, fleet-wide: the block lifted and the limit full again.
        status, answer, _ = post(a, "/v1/check", check)
        self.assertEqual((status, answer["remaining"]), (200, LIMIT - 1), answer)
        self.assertNotIn("blocked", by_name(answer)[name])

    def test_rule_block_seen_and_reset_across_two_servers(self):
        flags = server_flags(self.workdir)
        a, b = self.start(*flags), self.start(*flags)
        check = check_body("guard", 1, login="mia")
        reset = {"domain": "guard", "descriptors": check["descriptors"]}
        self.assertResetAcrossServers(a, b, check, reset, "login")
        # Another key was never touched by either.
        status, answer, _ = post(b, "/v1/check", check_body("guard", 1, login="ned"))
        self.assertEqual((status, answer["remaining"]), (200, LIMIT - 1), answer)

    def test_adhoc_block_seen_and_reset_across_two_servers(self):
        flags = server_flags(self.workdir)
        a, b = self.start(*flags), self.start(*flags)
        self.assertResetAcrossServers(a, b, {**ADHOC, "cost": 1}, ADHOC, "adhoc")



class ResetOffTest(unittest.TestCase):
    def test_reset_is_off_without_an_admin_token_file(self):
        directory = tempfile.mkdtemp(prefix="sluice-reset-off.")
        server = memory_server(RULES, *server_flags(directory, token=False))
        try:
            reset = {"domain": "guard", "descriptors": check_body("guard", login="oz")[
                "descriptors"]}
            for headers in (None, admin(), admin("anything-at-all-0123")):
                status, answer, _ = post(server, "/v1/reset", reset, headers)
                self.assertEqual(status, 403, answer)
                self.assertIn("admin endpoints are off", answer["error"])
            for body in (ADHOC, {"garbage": True}):
                status, answer, _ = post(server, "/v1/reset", body, admin())
                self.assertEqual(status, 403, answer)
            self.assertEqual(server.stop(), 0)
        finally:
            server.cleanup()
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
