#!/usr/bin/env python3
"""A flood of receipts never settled costs the server nothing (issue 33): a receipt is held by
its client, and the store keeps nothing for it until it is settled.

On the memory store, 10,000 checks with "receipt": true on one key: every answer carries a
receipt of its own, and GET /metrics' sluice_store_keys stays at 1 (the one key used) all
along. Then 2,000 of those receipts settled (refunds): each settles once (a replay is refused:
its id is kept), the key's count is exact, and sluice_store_keys is still 1: the ids a store
keeps to refuse replays (MemoryStoreOptions::max_once_claims, a million, dropped as they
expire) are not keys. That bound is neither a flag nor a metric of sluiced, so it is not
reached here; tests/memory/settle_test.cc holds the store to it. Python 3 standard library
only.

    python3 tests/integration/settle_flood_test.py --sluiced build/bin/sluiced
"""

import shutil
import sys
import tempfile
import unittest

import sluiced
from settle_fixture import MONTH, Connections, check_body, left, memory_server, server_flags

LIMIT, CHECKS, SETTLES = 1_000_000, 10_000, 2_000
RULES = f"""
domain: flood
descriptors:
  - key: user
    rate_limit: {{name: user, unit: month, requests_per_unit: {LIMIT}}}
"""


def rss_kib(server):
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return None


class FloodTest(unittest.TestCase):
    def setUp(self):
        sluiced.away_from_edge(MONTH, 300)  # The count compared is one window's.
        self.directory = tempfile.mkdtemp(prefix="sluice-settle-flood.")
        self.server = memory_server(RULES, *server_flags(self.directory))
        self.conns = Connections()

    def tearDown(self):
        self.conns.close()
        try:
            self.assertEqual(self.server.stop(), 0)
        finally:
            self.server.cleanup()
            shutil.rmtree(self.directory, ignore_errors=True)

    def keys(self):
        return self.server.metric("sluice_store_keys")

    def test_unsettled_receipts_hold_nothing_and_settles_no_keys(self):
        self.assertEqual(self.keys(), 0)
        body = check_body("flood", 1, receipt=True, user="flood")
        receipts = []
        rss = [rss_kib(self.server)]
        for i in range(CHECKS):
            status, answer, _ = self.conns.post(self.server, "/v1/check", body)
            self.assertEqual(status, 200, answer)
            receipts.append(answer["receipt"])
            if (i + 1) % 2_500 == 0:
                self.assertEqual(self.keys(), 1, f"after {i + 1} checks")
                rss.append(rss_kib(self.server))
        self.assertEqual(len(set(receipts)), CHECKS)  # One receipt each, none kept here.
        self.assertEqual(left(self.server, "flood", user="flood"), {"user": LIMIT - CHECKS})

        for token in receipts[:SETTLES]:
            status, answer, _ = self.conns.post(self.server, "/v1/settle",
                                                {"receipt": token, "cost": 0})
            self.assertEqual((status, answer.get("given_back")), (200, 1), answer)
        rss.append(rss_kib(self.server))
        status, answer, _ = self.conns.post(self.server, "/v1/settle",
                                            {"receipt": receipts[0], "cost": 0})
        self.assertEqual(status, 400, answer)
        self.assertIn("settled already", answer["error"])
        metrics = self.server.metrics()
        self.assertEqual(self.server.metric("sluice_store_keys", metrics), 1)
        self.assertEqual(self.server.metric("sluice_settles_total", metrics), SETTLES)
        self.assertEqual(self.server.metric("sluice_settles_refused_total", metrics), 1)
        self.assertEqual(left(self.server, "flood", user="flood"),
                         {"user": LIMIT - CHECKS + SETTLES})
        # Resident memory, for the record (not asserted: allocators and pages vary).
        print(f"\nVmRSS KiB: start, every 2,500 checks, after {SETTLES} settles: {rss}",
              file=sys.stderr)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
