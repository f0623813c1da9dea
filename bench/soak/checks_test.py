#!/usr/bin/env python3
"""The soak's checks on traces built by hand: each catches what it must and no more.

    python3 bench/soak/checks_test.py
"""

import unittest

import checks

ALWAYS = lambda a, b: True  # noqa: E731


def admits(times, status=200, latency=0.001):
    return [(t, t + latency, status) for t in times]


class FixedWindowTest(unittest.TestCase):
    def test_at_the_limit_with_a_denial_is_exact(self):
        trace = admits([10.1, 10.2, 10.3]) + admits([10.4], 429)
        report = checks.fixed_window(trace, 3, 1.0, ALWAYS, ALWAYS)
        self.assertEqual((report.over, report.exact_checked, report.exact_missed), ([], 1, []))

    def test_one_over_the_limit_is_caught(self):
        report = checks.fixed_window(admits([10.1, 10.2, 10.3, 10.4]), 3, 1.0, ALWAYS, ALWAYS)
        self.assertEqual(report.over, [(10.0, 4)])

    def test_an_admission_across_an_edge_is_never_counted_as_over(self):
        trace = admits([10.1, 10.2, 10.3]) + [(10.999, 11.001, 200)]
        report = checks.fixed_window(trace, 3, 1.0, ALWAYS, ALWAYS)
        self.assertEqual(report.over, [])

    def test_under_admission_with_a_denial_is_caught(self):
        trace = admits([10.1, 10.2]) + admits([10.4], 429)
        report = checks.fixed_window(trace, 3, 1.0, ALWAYS, ALWAYS)
        self.assertEqual(report.exact_missed, [(10.0, 2, 2)])

    def test_a_503_in_the_window_skips_the_exact_check(self):
        trace = admits([10.1, 10.2]) + admits([10.3], 503) + admits([10.4], 429)
        report = checks.fixed_window(trace, 3, 1.0, ALWAYS, ALWAYS)
        self.assertEqual((report.exact_checked, report.exact_missed), (0, []))

    def test_windows_the_policy_does_not_promise_are_not_checked(self):
        trace = admits([10.1, 10.2, 10.3, 10.4, 11.5])
        report = checks.fixed_window(trace, 3, 1.0, lambda a, b: a >= 11, None)
        self.assertEqual((report.over, report.checked), ([], 1))


class GcraTest(unittest.TestCase):
    def test_a_burst_then_the_rate_holds(self):
        # Burst 3, one per second: 3 at once, then one each second.
        trace = admits([0.0, 0.01, 0.02, 1.03, 2.04, 3.05])
        report = checks.gcra(trace, 1, 1.0, 3, ALWAYS)
        self.assertEqual(report.over, [])

    def test_one_more_than_the_burst_at_once_is_caught(self):
        report = checks.gcra(admits([0.0, 0.01, 0.02, 0.03]), 1, 1.0, 3, ALWAYS)
        self.assertEqual(len(report.over), 1)

    def test_too_fast_after_a_long_run_is_caught(self):
        # At exactly the rate for 50 s, then two in the same instant once the bucket is empty.
        times = [0.0, 0.0001, 0.0002] + [1.0 + i for i in range(50)] + [50.0005]
        report = checks.gcra(admits(times, latency=0.0001), 1, 1.0, 3, ALWAYS)
        self.assertEqual(len(report.over), 1)

    def test_an_unhealthy_span_breaks_the_run(self):
        times = [0.0, 0.01, 0.02, 5.0, 5.01, 5.02]
        report = checks.gcra(admits(times), 1, 10.0, 3,
                             lambda a, b: not (a <= 3 <= b))
        self.assertEqual(report.over, [])
        self.assertTrue(checks.gcra(admits(times), 1, 10.0, 3, ALWAYS).over)


class HealthTest(unittest.TestCase):
    def test_faults_settle_and_failures(self):
        spans = checks.failure_spans([(0, 0), (1, 0), (2, 5), (3, 5), (4, None)])
        self.assertEqual(spans, [(1, 2), (3, 4)])
        health = checks.Health([("frozen", 10, 12, 10, 12)], spans, settle=2)
        self.assertFalse(health.healthy(13, 13.5))
        self.assertTrue(health.healthy(14.5, 20))
        self.assertFalse(health.healthy(1.5, 1.6))


class WhileDownTest(unittest.TestCase):
    def test_answers_outside_the_promise_while_down(self):
        faults = [("killed", 10, 20, 11, 16)]
        trace = (admits([11.2, 12.0, 13.0], 200) + admits([14.0], 429) +
                 admits([15.0, 17.0], 503) + admits([9.0], 200))
        # 11.2 is within the margin: Redis may still have answered it.
        self.assertEqual(checks.while_down(trace, faults, lambda kind: {503}),
                         {200: 2, 429: 1})
        self.assertEqual(checks.while_down(trace, faults, lambda kind: {200}), {429: 1, 503: 1})
        self.assertEqual(checks.while_down(trace, faults, lambda kind: {200, 429, 503}), {})


class RssTest(unittest.TestCase):
    def test_growth_beyond_the_margin_fails(self):
        flat = [(t, 100 + (t % 2)) for t in range(30)]
        self.assertTrue(checks.rss_growth(flat, 0.2, 0)[3])
        growing = [(t, 100 + 3 * t) for t in range(30)]
        self.assertFalse(checks.rss_growth(growing, 0.2, 0)[3])
        self.assertAlmostEqual(checks.slope(growing, 10), 3.0)


if __name__ == "__main__":
    unittest.main(verbosity=1)
