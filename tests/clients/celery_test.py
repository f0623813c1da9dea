#!/usr/bin/python3
"""examples/celery for real: 3 Celery worker processes (Debian's python3-celery) on a
redis-server broker of the test's own run 30 tasks that each call a fake partner API under
the example's global limit, 5 per second through sluiced (sliding_log); half ask once and
retry after the server's retry time, half wait on the server first.

Checked: every task called the partner exactly once, and sluiced admitted at most 5 calls in
any second. A call's admission lies between the time its task asked sluiced (the task sends
it along) and the time the partner received it, both on the system clock sluiced decides by;
so 6 calls whose latest arrival and earliest asking are less than a second apart would be 6
admissions within a second. (Arrival times alone cannot show it: a call held up after its
admission, then 5 admitted a second later and sent at once, arrive closer than a second
apart while sluiced kept its limit; the most arrivals within a second is printed.)

Runs on Debian's /usr/bin/python3, not the python3 of PATH: Celery and redis-py come from
Debian's packages, installed for Debian's Python alone.

    /usr/bin/python3 tests/clients/celery_test.py --sluiced build/bin/sluiced
"""

import http.server
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLE = os.path.join(ROOT, "examples", "celery")
sys.path[:0] = [os.path.join(ROOT, "clients", "python"), os.path.join(ROOT, "tests", "integration"),
                EXAMPLE]

import redis_test  # noqa: E402
import sluiced  # noqa: E402

TASKS = 30
WORKERS = 3
LIMIT, PERIOD = 5, 1.0


class Partner:
    """The fake partner API: records each call's order, the time its task asked sluiced and
    the time it arrived here."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()
        partner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                arrived = time.time()
                call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with partner.lock:
                    partner.calls.append((call["order"], call["asked"], arrived))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def orders(self):
        with self.lock:
            return sorted(order for order, _, _ in self.calls)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def most_admitted_within(calls, period):
    """The most calls whose admissions surely fell within less than `period`: for each call
    as the earliest to ask, it and the later-asking calls that arrived soonest, while the
    latest arrival among them is under `period` after that asking."""
    most = 0
    for order, asked, arrived in calls:
        later = sorted(a for o, b, a in calls if b >= asked and o != order)
        group = [arrived]
        for a in later:
            if max(group + [a]) - asked < period:
                group.append(a)
        most = max(most, len(group))
    return most


def most_arrived_within(calls, period):
    arrivals = sorted(a for _, _, a in calls)
    return max(sum(1 for b in arrivals if a <= b < a + period) for a in arrivals)


class CeleryTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-celery-test.")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        self.redis = redis_test.Redis(self.workdir)
        self.addCleanup(self.redis.stop)
        self.sluiced = sluiced.Sluiced(self.workdir)  # No rules: the limit is ad hoc.
        self.addCleanup(self.sluiced.stop)
        self.partner = Partner()
        self.addCleanup(self.partner.close)
        self.env = dict(os.environ, BROKER_URL=self.redis.url + "/0",
                        SLUICE_URL="http://127.0.0.1:%d" % self.sluiced.port,
                        PARTNER_URL=self.partner.url,
                        PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "clients", "python"),
                                                    EXAMPLE]))
        os.environ.update({k: self.env[k] for k in ("BROKER_URL", "SLUICE_URL", "PARTNER_URL")})
        self.workers = []

    def start_worker(self, n):
        log = open(os.path.join(self.workdir, "worker%d.log" % n), "wb")
        self.addCleanup(log.close)
        proc = subprocess.Popen(
            ["/usr/bin/python3", "-m", "celery", "-A", "tasks", "worker", "--pool", "solo",
             "--hostname", "w%d@%%h" % n, "--loglevel", "INFO", "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            cwd=EXAMPLE, env=self.env, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL)
        self.workers.append(proc)
        self.addCleanup(self.stop_worker, proc)

    @staticmethod
    def stop_worker(proc):
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # Celery's warm shutdown.
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def worker_logs(self):
        text = ""
        for n in range(len(self.workers)):
            with open(os.path.join(self.workdir, "worker%d.log" % n), "rb") as f:
                text += "--- worker %d ---\n%s\n" % (n, f.read().decode(errors="replace")[-3000:])
        return text

    def test_three_workers_share_one_limit_and_every_task_completes(self):
        import tasks  # The example, with the broker of this test (BROKER_URL above).

        for n in range(WORKERS):
            self.start_worker(n)
        for order in range(TASKS):
            task = tasks.call_partner if order % 2 == 0 else tasks.call_partner_waiting
            task.delay(order)
        deadline = time.monotonic() + 300  # A generous bound for a loaded machine; ~6 s idle.
        while len(self.partner.orders()) < TASKS and time.monotonic() < deadline:
            for proc in self.workers:
                self.assertIsNone(proc.poll(), "a worker exited:\n" + self.worker_logs())
            time.sleep(0.2)

        self.assertEqual(self.partner.orders(), list(range(TASKS)), self.worker_logs())
        calls = list(self.partner.calls)
        self.assertLessEqual(most_admitted_within(calls, PERIOD), LIMIT, calls)
        arrivals = sorted(a for _, _, a in calls)
        print("celery: %d calls over %.2f s; most arrivals at the partner within 1 s: %d"
              % (len(calls), arrivals[-1] - arrivals[0], most_arrived_within(calls, PERIOD)))
        self.assertNotIn("Traceback", self.worker_logs())


class WindowCheckTest(unittest.TestCase):
    """The check itself, on hand-built calls, so that it cannot pass by missing what it
    looks for."""

    def test_six_surely_within_a_second_are_caught(self):
        calls = [(i, 10.0 + i * 0.15, 10.01 + i * 0.15) for i in range(6)]
        self.assertEqual(most_admitted_within(calls, 1.0), 6)

    def test_a_late_arrival_is_not_blamed_on_sluiced(self):
        # Call 0 asked at 10.0 but arrived at 10.3; 5 more asked and arrived at 11.0 to 11.2.
        calls = [(0, 10.0, 10.3)] + [(i, 10.95 + i * 0.04, 11.0 + i * 0.04) for i in range(1, 6)]
        self.assertEqual(most_arrived_within(calls, 1.0), 6)
        self.assertEqual(most_admitted_within(calls, 1.0), 5)


if __name__ == "__main__":
    sluiced.main(verbosity=2)
