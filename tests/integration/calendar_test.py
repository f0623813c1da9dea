#!/usr/bin/env python3
"""Integration tests for calendar quotas through sluiced's HTTP API: a rule's `calendar:
true` and `time_zone`, an ad hoc check's `"calendar": true`, and what is refused (an
unknown zone at start, on reload and ad hoc), on the memory store.

    python3 tests/integration/calendar_test.py --sluiced build/bin/sluiced [unittest options]

The windows' ends are worked out here with Python's zoneinfo (over the same system tzdata),
not with sluiced's Abseil: each answer's reset_after_us must be the window's end less the
server's time, which lies between the clock read before the request and the one after it.
Python 3.11 standard library only.
"""

import json
import os
import time
import unittest
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import sluiced

RULES = """
domain: billing
descriptors:
  - key: plan
    rate_limit: {unit: month, requests_per_unit: 2, calendar: true, time_zone: Europe/Berlin}
  - key: ip
    rate_limit: {unit: day, requests_per_unit: 1, calendar: true, time_zone: Asia/Kolkata}
"""


def next_start_us(unit, zone, at_s):
    """The first instant (us since the epoch) of the window after the one holding `at_s`:
    the next local midnight, Monday, 1st of the month or January 1 in `zone`."""
    tz = ZoneInfo(zone)
    local = datetime.fromtimestamp(at_s, tz)
    day = local.date()
    if unit == "day":
        first = day + timedelta(days=1)
    elif unit == "week":
        first = day + timedelta(days=7 - day.weekday())
    elif unit == "month":
        first = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
    else:
        first = day.replace(year=day.year + 1, month=1, day=1)
    # Midnight of that date in the zone (no zone used here skips or repeats midnight).
    start = datetime(first.year, first.month, first.day, tzinfo=tz)
    return int(start.timestamp()) * 1_000_000


class CalendarTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.server = sluiced.Sluiced.with_rules(RULES, "--watch-interval", "100ms", threads=2)
        cls.server.start()

    @classmethod
    def tearDownClass(cls):
        rc = cls.server.stop()
        cls.server.cleanup()
        assert rc == 0, cls.server.output()

    def post(self, body):
        r = self.server.request("POST", "/v1/check", json.dumps(body))
        return r.status, json.loads(r.body)

    def timed(self, body):
        before = time.time()
        status, answer = self.post(body)
        after = time.time()
        return status, answer, before, after

    def assertResetIsTheWindowsEnd(self, value_us, unit, zone, before, after):
        # The server read its clock between `before` and `after`; the window holding either
        # is found from it (both are the same window but within a request of its end).
        end_before = next_start_us(unit, zone, before)
        end_after = next_start_us(unit, zone, after)
        self.assertLessEqual(value_us, end_after - int(before * 1e6),
                             "reset %d us is past the %s's end in %s" % (value_us, unit, zone))
        self.assertGreaterEqual(value_us, end_before - int(after * 1e6) - 1,
                                "reset %d us ends before the %s in %s" % (value_us, unit, zone))

    def rules_check(self, key, value):
        return self.timed({"domain": "billing",
                           "descriptors": [{"entries": [{"key": key, "value": value}]}]})

    def test_a_rule_on_berlins_months(self):
        for remaining in (1, 0):
            status, answer, before, after = self.rules_check("plan", "acme")
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["remaining"], remaining)
            self.assertResetIsTheWindowsEnd(answer["reset_after_us"], "month", "Europe/Berlin",
                                            before, after)
        limit = answer["limits"][0]
        self.assertEqual((limit["period"], limit["calendar"], limit["time_zone"]),
                         ("1mo", True, "Europe/Berlin"))
        status, answer, before, after = self.rules_check("plan", "acme")
        self.assertEqual(status, 429, answer)
        self.assertResetIsTheWindowsEnd(answer["retry_after_us"], "month", "Europe/Berlin",
                                        before, after)

    def test_a_rule_on_kolkatas_days(self):
        status, answer, before, after = self.rules_check("ip", "10.0.0.1")
        self.assertEqual(status, 200, answer)
        status, answer, before, after = self.rules_check("ip", "10.0.0.1")
        self.assertEqual(status, 429, answer)
        self.assertResetIsTheWindowsEnd(answer["retry_after_us"], "day", "Asia/Kolkata",
                                        before, after)

    def test_ad_hoc_calendar_quotas(self):
        for unit, period, zone in (("day", "1d", "America/New_York"), ("week", "1w", "UTC"),
                                   ("year", "1y", "Australia/Lord_Howe")):
            body = {"key": "acme-" + unit, "limit": 1, "period": period, "calendar": True,
                    "time_zone": zone}
            status, answer, _, _ = self.timed(body)
            self.assertEqual(status, 200, answer)
            status, answer, before, after = self.timed(body)
            self.assertEqual(status, 429, answer)
            self.assertResetIsTheWindowsEnd(answer["retry_after_us"], unit, zone, before, after)

    def test_what_is_refused_names_the_problem(self):
        status, answer = self.post({"key": "k", "limit": 1, "period": "1mo", "calendar": True,
                                    "time_zone": "Europe/Berln"})
        self.assertEqual(status, 400, answer)
        self.assertIn("unknown time zone 'Europe/Berln'", json.dumps(answer))
        status, answer = self.post({"key": "k", "limit": 1, "period": "1mo", "calendar": True,
                                    "algorithm": "gcra"})
        self.assertEqual(status, 400, answer)
        self.assertIn("fixed_window", json.dumps(answer))
        status, answer = self.post({"key": "k", "limit": 1, "period": "1mo", "calendar": True,
                                    "time_zone": "../../../etc/passwd"})
        self.assertEqual(status, 400, answer)

    def test_a_reload_with_an_unknown_zone_is_refused_and_the_rules_kept(self):
        failures = self.server.metric("sluice_config_reload_failures_total")
        tmp = self.server.config + ".tmp"
        with open(tmp, "w") as f:
            f.write(RULES.replace("Asia/Kolkata", "Asia/Kolkatta"))
        os.replace(tmp, self.server.config)
        try:
            deadline = time.monotonic() + 60  # A watchdog for a loaded machine, not a bound.
            while (self.server.metric("sluice_config_reload_failures_total") == failures
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            self.assertEqual(self.server.metric("sluice_config_reload_failures_total"),
                             failures + 1)
            self.assertIn("unknown time zone 'Asia/Kolkatta'", self.server.output())
            status, answer, _, _ = self.rules_check("ip", "10.0.0.9")
            self.assertEqual(status, 200, answer)
            self.assertEqual(answer["limits"][0]["time_zone"], "Asia/Kolkata")
        finally:
            with open(tmp, "w") as f:
                f.write(RULES)
            os.replace(tmp, self.server.config)


if __name__ == "__main__":
    sluiced.main()
