"""What the soak checks, as pure functions over what it recorded (no servers): standard library
only, tested by checks_test.py on traces built by hand.

Times are seconds since the epoch (time.time(), the clock sluiced and Redis decide by). A
request is (send, recv, status): its decision was made at some instant in [send, recv].

- Fixed windows are aligned to the epoch (floor(t / P)). An admission is *definitely* in a
  window when both its send and receive times are; it *may* be in every window its interval
  touches. A window is over-admitted when its definite admissions exceed the limit: that holds
  whatever the timing, so it is never a false alarm. Where the window was healthy, saw a definite
  denial and no answer but 200 and 429 (a 503 or a timeout may still have been charged), the
  limit must lie between the definite and the possible admissions: exactly the limit.
- gcra (a token bucket: burst B, one unit every I = P / N) admits at most B + (t_j - t_i) / I
  from its i-th to its j-th admission. With one request in flight per key the order is known,
  and t_j - t_i <= recv_j - send_i, so k = j - i + 1 > B + (recv_j - send_i) / I is an
  over-admission whatever the timing.
- Memory: the largest RSS of the last third of the run may exceed the largest of the first
  third by at most `rel` of it plus `abs_bytes`.
"""

import math

OK, DENIED = 200, 429


class Health:
    """When one server's Redis could be trusted: not inside a fault of the schedule (nor `settle`
    seconds after one), and not between two samples of its metrics across which it counted a
    Redis failure or a fallback."""

    def __init__(self, faults, failure_spans, settle):
        self.bad = sorted([(f[1], f[2] + settle) for f in faults] +
                          list(failure_spans))

    def healthy(self, a, b):
        return not any(start <= b and a <= end for start, end in self.bad)


def failure_spans(samples):
    """[(t0, t1)] between consecutive metric samples [(t, failures + fallbacks)] whose count
    rose (a sample that could not be read, None, counts as a rise)."""
    spans = []
    for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
        if c0 is None or c1 is None or c1 != c0:
            spans.append((t0, t1))
    return spans


class WindowReport:
    def __init__(self):
        self.windows = 0            # Windows holding at least one answer.
        self.checked = 0            # Windows the over-admission check applied to.
        self.admitted = 0
        self.max_in_window = 0      # The most definite admissions of one checked window.
        self.over = []              # (window start, definite admissions) above the limit.
        self.exact_checked = 0      # Healthy windows with a denial: exactly the limit expected.
        self.exact_missed = []      # (window start, definite, possible) not bracketing it.


def fixed_window(requests, limit, period, applies, healthy):
    """Checks one key's fixed window of `limit` per `period` seconds over `requests`.
    applies(a, b): the over-admission check holds for [a, b) (the policy promises it there);
    healthy(a, b): Redis was healthy over [a, b) (for the exact check; None: no exact check)."""
    definite, possible, denied, other = {}, {}, set(), set()
    for send, recv, status in requests:
        first, last = math.floor(send / period), math.floor(recv / period)
        if status == OK:
            if first == last:
                definite[first] = definite.get(first, 0) + 1
            for w in range(first, last + 1):
                possible[w] = possible.get(w, 0) + 1
        elif status == DENIED:
            if first == last:
                denied.add(first)
        else:
            other.update(range(first, last + 1))
    report = WindowReport()
    windows = set(possible) | denied | other
    report.windows = len(windows)
    report.admitted = sum(1 for r in requests if r[2] == OK)
    for w in sorted(windows):
        a, b = w * period, (w + 1) * period
        count = definite.get(w, 0)
        if applies(a, b):
            report.checked += 1
            report.max_in_window = max(report.max_in_window, count)
            if count > limit:
                report.over.append((a, count))
        if healthy is not None and w in denied and w not in other and healthy(a, b):
            report.exact_checked += 1
            if not count <= limit <= possible.get(w, 0):
                report.exact_missed.append((a, count, possible.get(w, 0)))
    return report


class GcraReport:
    def __init__(self):
        self.admitted = 0
        self.checked = 0        # Admissions inside runs the check applied to.
        self.worst = -math.inf  # max of k - B - (recv_j - send_i) / I over checked pairs.
        self.over = []          # (send of the j-th admission, k, allowance) over the bound.


def gcra(requests, limit, period, burst, applies):
    """Checks one key's gcra limit over `requests`, one in flight at a time (in send order).
    Pairs are checked inside runs of admissions whose whole span `applies`."""
    interval = period / limit
    report = GcraReport()
    admitted = [(s, r) for s, r, status in sorted(requests) if status == OK]
    report.admitted = len(admitted)
    run = []
    for s, r in admitted:
        if run and not applies(run[0][0], r):
            # Start the run afresh from the admissions this one can be paired with.
            run = [(s0, r0) for s0, r0 in run if applies(s0, r)]
        if not applies(s, r):
            run = []
            continue
        run.append((s, r))
        report.checked += 1
        _check_last(run, interval, burst, report)
    return report


def _check_last(run, interval, burst, report):
    """Checks every pair (i, last) of `run`: k = last - i + 1 admissions in recv_last - send_i."""
    j = len(run) - 1
    recv_j = run[j][1]
    for i in range(j, -1, -1):
        k = j - i + 1
        allowance = burst + (recv_j - run[i][0]) / interval
        excess = k - allowance
        report.worst = max(report.worst, excess)
        if excess > 1e-9:
            report.over.append((run[j][0], k, allowance))
            return
        if allowance - k > burst + 2:
            return  # Earlier i only add time faster than admissions can catch up: done.


def while_down(requests, faults, promised, margin=0.5):
    """{status: count} of the answers not in promised(kind) among requests sent and answered
    while Redis was surely down (a fault's down span, from `margin` seconds after it began)."""
    spans = [(f[0], f[3] + margin, f[4]) for f in faults]
    out = {}
    for send, recv, status in requests:
        for kind, a, b in spans:
            if a <= send and recv <= b and status not in promised(kind):
                out[status] = out.get(status, 0) + 1
    return out


def slope(samples, since):
    """Least-squares growth of [(t, value)] per second over the samples from `since` on."""
    points = [(t, v) for t, v in samples if t >= since]
    if len(points) < 2:
        return 0.0
    mt = sum(t for t, _ in points) / len(points)
    mv = sum(v for _, v in points) / len(points)
    spread = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (v - mv) for t, v in points) / spread if spread else 0.0


def rss_growth(samples, rel, abs_bytes):
    """(first third's max, last third's max, bound, ok) over samples [(t, bytes)]."""
    if len(samples) < 3:
        return None, None, None, True
    t0, t1 = samples[0][0], samples[-1][0]
    third = (t1 - t0) / 3
    first = max(v for t, v in samples if t <= t0 + third)
    last = max(v for t, v in samples if t >= t1 - third)
    bound = first * (1 + rel) + abs_bytes
    return first, last, bound, last <= bound
