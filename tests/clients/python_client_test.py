#!/usr/bin/env python3
"""The Python client (clients/python, package sluice) against a real sluiced: every call and
figure, a denial as a value, an unreachable or silent server under each on_error policy,
leases given back when their block raises, the decorator, the asyncio client.

    python3 tests/clients/python_client_test.py --sluiced build/bin/sluiced

Runs on any Python 3.9+ with the standard library alone (ctest runs it on the python3 of PATH
and on Debian's /usr/bin/python3).
"""

import asyncio
import http.server
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [os.path.join(ROOT, "clients", "python"), os.path.join(ROOT, "tests", "integration")]

import sluice  # noqa: E402
import sluiced  # noqa: E402


SERVER = None


def setUpModule():
    global SERVER
    with open(os.path.join(HERE, "rules.yaml")) as f:
        SERVER = sluiced.Sluiced.with_rules(f.read()).start()


def tearDownModule():
    SERVER.cleanup()


def url():
    return "http://127.0.0.1:%d" % SERVER.port


class Silent:
    """A TCP listener that accepts and never answers (or answers `reply` and closes)."""

    def __init__(self, reply=None):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.reply = reply
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.reply is not None:
                conn.recv(65536)
                conn.sendall(self.reply)
                conn.close()

    def close(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


class Answering:
    """An HTTP server answering each POST path with answers[path](): (status, JSON object);
    `asked` lists the paths in the order asked."""

    def __init__(self, answers):
        self.asked = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.asked.append(self.path)
                status, answer = answers.get(self.path, lambda: (404, {"error": "no"}))()
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


GRANTED = (200, {"allowed": True, "lease": "the-lease", "lease_ttl_us": 600000000})

class CheckTest(unittest.TestCase):
    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def test_ad_hoc_figures_then_a_denial_as_a_value(self):
        # sliding_log over an hour: no window edge to cross while the test runs.
        ask = dict(key="adhoc-figures", algorithm="sliding_log", limit=3, period="1h")
        remaining = []
        for _ in range(3):
            d = self.client.check(**ask)
            self.assertIsInstance(d, sluice.Decision)
            self.assertTrue(d.allowed)
            self.assertEqual((d.status, d.retry_after, d.error), (200, 0.0, None))
            self.assertTrue(0 < d.reset_after <= 3600, d)
            remaining.append(d.remaining)
        self.assertEqual(remaining, [2, 1, 0])
        denied = self.client.check(**ask)
        self.assertFalse(denied.allowed)
        self.assertFalse(denied)
        self.assertEqual((denied.status, denied.remaining, denied.never), (429, 0, False))
        self.assertTrue(0 < denied.retry_after <= 3600, denied)
        [limit] = denied.limits
        self.assertEqual((limit.name, limit.algorithm, limit.limit, limit.period, limit.mode),
                         ("adhoc", "sliding_log", 3, "1h", "hard"))
        self.assertEqual((limit.allowed, limit.remaining), (False, 0))
        self.assertEqual(limit.retry_after, denied.retry_after)

    def test_cost_zero_counts_nothing_and_a_cost_above_the_limit_is_never(self):
        ask = dict(key="adhoc-cost", algorithm="gcra", limit=5, period=3600, burst=5)
        self.assertEqual(self.client.check(cost=0, **ask).remaining, 5)
        self.assertEqual(self.client.check(cost=2, **ask).remaining, 3)
        never = self.client.check(cost=6, **ask)
        self.assertFalse(never.allowed)
        self.assertTrue(never.never)
        self.assertTrue(math.isinf(never.retry_after))
        self.assertEqual(self.client.check(cost=0, **ask).remaining, 3)

    def test_rules_descriptors_in_their_order(self):
        bob = [{"user": "bob"}]
        first = self.client.check(domain="api", descriptors=bob)
        self.assertEqual((first.allowed, first.remaining, first.limits[0].name),
                         (True, 1, "api.user"))
        self.assertTrue(self.client.check(domain="api", descriptors=bob).allowed)
        self.assertFalse(self.client.check(domain="api", descriptors=bob).allowed)
        self.assertTrue(self.client.check(domain="api", descriptors=[{"user": "carol"}]).allowed)
        # A descriptor's entries keep their order: path then user is the nested rule.
        search = self.client.check(domain="api", descriptors=[{"path": "/search", "user": "dan"}])
        self.assertEqual((search.remaining, search.limits[0].name), (0, "search"))
        pairs = self.client.check(domain="api", descriptors=[[("path", "/search"), ("user", "dan")]])
        self.assertFalse(pairs.allowed)
        reversed_order = self.client.check(domain="api",
                                           descriptors=[{"user": "dan", "path": "/search"}])
        self.assertEqual((reversed_order.allowed, reversed_order.remaining,
                          reversed_order.limits), (True, None, []))

    def test_unknown_domain_is_allowed_unlimited(self):
        d = self.client.check(domain="nobody", descriptors=[{"user": "x"}])
        self.assertEqual((d.allowed, d.remaining, d.limits), (True, None, []))

    def test_bad_requests_raise_naming_the_problem(self):
        with self.assertRaisesRegex(sluice.BadRequest, "unknown algorithm 'gcrx'"):
            self.client.check(key="k", algorithm="gcrx", limit=1, period="1s")
        with self.assertRaisesRegex(sluice.BadRequest, "cost"):
            self.client.check(key="k", limit=1, period="1s", cost=-1)
        with self.assertRaisesRegex(TypeError, "either key= .* or domain="):
            self.client.check(limit=1, period="1s")
        with self.assertRaisesRegex(TypeError, "descriptors= is a list"):
            self.client.check(domain="api", descriptors={"user": "bob"})
        with self.assertRaises(ValueError):
            self.client.check(key="k", limit=1, period=-1)
        with self.assertRaises(ValueError):
            sluice.Client(url(), on_error="maybe")

    def test_one_connection_is_reused(self):
        self.client.check(key="reuse", limit=100, period="1h")
        conn = self.client._local.conn
        sock = conn.sock
        for _ in range(5):
            self.client.check(key="reuse", limit=100, period="1h")
        self.assertIs(self.client._local.conn, conn)
        self.assertIs(conn.sock, sock)


    @unittest.skipUnless(hasattr(os, "fork"), "fork() only")
    def test_a_forked_child_opens_its_own_connection(self):
        # A Celery prefork parent that used the client: the child must not share its socket.
        self.client.check(key="fork-parent", limit=100, period="1h")
        parent_conn = self.client._local.conn
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:  # The child: reports, then leaves without running the parent's cleanup.
            code = 1
            try:
                d = self.client.check(key="fork-child", limit=1, period="1h")
                own = self.client._local.conn is not parent_conn
                os.write(writer, b"%d %d" % (own, d.allowed and d.remaining == 0))
                code = 0
            finally:
                os._exit(code)
        os.close(writer)
        with os.fdopen(reader, "rb") as r:
            report = r.read()
        _, status = os.waitpid(pid, 0)
        self.assertEqual((status, report), (0, b"1 1"))
        again = self.client.check(key="fork-child", limit=1, period="1h")
        self.assertEqual((again.allowed, again.remaining), (False, 0))
        self.assertIs(self.client._local.conn, parent_conn)


class AcquireTest(unittest.TestCase):
    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def test_acquire_waits_on_the_server_then_goes_ahead(self):
        ask = dict(key="acquire-wait", algorithm="sliding_log", limit=1, period="300ms")
        self.assertTrue(self.client.acquire(max_wait=30, **ask).allowed)
        second = self.client.acquire(max_wait="30s", **ask)
        self.assertTrue(second.allowed, second)
        self.assertEqual(second.status, 200)

    def test_acquire_denied_beyond_max_wait(self):
        ask = dict(key="acquire-far", algorithm="sliding_log", limit=1, period="1h")
        self.assertTrue(self.client.acquire(max_wait=0, **ask).allowed)
        denied = self.client.acquire(max_wait=0.05, **ask)
        self.assertFalse(denied.allowed)
        self.assertTrue(denied.retry_after > 0.05, denied)


class UnmatchedTest(unittest.TestCase):
    """A request no rule matches is admitted with no limit: the answer says "unmatched", and
    an acquire or a lease warns (docs/python.md's lease once named a domain no rule had, and
    its block ran unlimited with nothing said)."""

    typo = dict(domain="jobs", descriptors=[{"job": "export"}])  # The rules have domain api.

    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def test_a_lease_no_rule_matches_warns_at_the_with_line(self):
        with self.assertWarnsRegex(sluice.UnmatchedWarning,
                                   r"domain 'jobs', descriptors \[\{'job': 'export'\}\]") as cm:
            with self.client.lease(max_wait=0, **self.typo) as held:
                self.assertEqual((held.allowed, held.lease, held.unmatched), (True, None, True))
        self.assertEqual(cm.filename, os.path.abspath(__file__))

    def test_an_acquire_no_rule_matches_warns(self):
        for ask in (self.typo, dict(domain="api", descriptors=[{"jobs": "export"}])):
            with self.assertWarns(sluice.UnmatchedWarning) as cm:
                d = self.client.acquire(max_wait=0, **ask)
            self.assertEqual((d.allowed, d.remaining, d.limits, d.unmatched),
                             (True, None, [], True))
            self.assertEqual(cm.filename, os.path.abspath(__file__))

    def test_the_async_client_warns_at_the_callers_line_too(self):
        # Its calls run in a worker thread: the warning is made back in the coroutine, so that
        # it names the caller's await, not asyncio's thread.
        client = sluice.AsyncClient(url(), timeout=30)
        self.addCleanup(client.close)

        async def acquire():
            return await client.acquire(max_wait=0, **self.typo)

        async def lease():
            async with client.lease(max_wait=0, **self.typo) as held:
                return held

        for ask in (acquire, lease):
            with self.subTest(ask=ask.__name__):
                with self.assertWarns(sluice.UnmatchedWarning) as cm:
                    d = asyncio.run(ask())
                self.assertTrue(d.unmatched)
                self.assertEqual(cm.filename, os.path.abspath(__file__))

    def test_what_a_rule_matches_says_nothing(self):
        with warnings.catch_warnings():
            warnings.simplefilter("error", sluice.UnmatchedWarning)
            with self.client.lease(max_wait=30, domain="api",
                                   descriptors=[{"job": "export"}]) as held:
                self.assertIsNotNone(held.lease)
                self.assertFalse(held.unmatched)
            ad_hoc = self.client.acquire(max_wait=0, key="unmatched-test", limit=1, period="1h")
            self.assertFalse(ad_hoc.unmatched)
            # A check is a value: "unmatched" is there to read, and nothing is said.
            check = self.client.check(**self.typo)
            self.assertEqual((check.allowed, check.unmatched), (True, True))


class UnreachableTest(unittest.TestCase):
    def test_refused_connection_follows_each_policy(self):
        port = sluiced.free_port()  # Nothing listens there.
        ask = dict(key="k", limit=1, period="1s")
        with sluice.Client("http://127.0.0.1:%d" % port, on_error="deny",
                           error_retry_after=2.5) as client:
            deny = client.check(**ask)
        self.assertEqual((deny.allowed, deny.retry_after, deny.status), (False, 2.5, None))
        self.assertIn("Connection refused", deny.error)
        with sluice.Client("http://127.0.0.1:%d" % port, on_error="allow") as client:
            allow = client.check(**ask)
        self.assertEqual((allow.allowed, allow.retry_after), (True, 0.0))
        self.assertIsNotNone(allow.error)

    def test_a_silent_server_times_out_under_each_policy(self):
        silent = Silent()
        try:
            for policy, allowed in (("deny", False), ("allow", True)):
                client = sluice.Client("http://127.0.0.1:%d" % silent.port, timeout=0.2,
                                       on_error=policy)
                self.addCleanup(client.close)
                d = client.check(key="k", limit=1, period="1s")
                self.assertEqual(d.allowed, allowed)
                self.assertIn("timed out", d.error)
                self.assertEqual(client.acquire(max_wait=0, key="k", limit=1,
                                                period="1s").allowed, allowed)
        finally:
            silent.close()

    def test_an_answer_that_is_not_a_decision_follows_the_policy(self):
        for reply in (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 21\r\n\r\n"
                      b'{"error":"too busy!"}',
                      b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                      b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{\"allowed\":1}",
                      b"garbage\r\n\r\n"):
            server = Silent(reply)
            try:
                with sluice.Client("http://127.0.0.1:%d" % server.port) as client:
                    d = client.check(key="k", limit=1, period="1s")
                self.assertFalse(d.allowed, reply)
                self.assertIsNotNone(d.error, reply)
            finally:
                server.close()


    def test_a_4xx_other_than_400_follows_the_policy(self):
        # A proxy in front of sluiced (403, 404, 408, 413), or a wrong path prefix in the url:
        # not a malformed call, so the caller's on_error policy, never BadRequest.
        for status in (b"403 Forbidden", b"404 Not Found", b"408 Request Timeout",
                       b"413 Payload Too Large"):
            reply = (b"HTTP/1.1 " + status + b"\r\nContent-Length: 23\r\n\r\n"
                     b'{"error":"not sluiced"}')
            for policy, allowed in (("deny", False), ("allow", True)):
                server = Silent(reply)
                try:
                    with sluice.Client("http://127.0.0.1:%d" % server.port,
                                       on_error=policy) as client:
                        d = client.check(key="k", limit=1, period="1s")
                        self.assertEqual((d.allowed, d.status), (allowed, None), status)
                        self.assertIn("HTTP " + status[:3].decode(), d.error)
                finally:
                    server.close()
                server = Silent(reply)
                try:
                    with sluice.Client("http://127.0.0.1:%d" % server.port,
                                       on_error=policy) as client:
                        self.assertIsNone(client.release("some-token"), status)
                finally:
                    server.close()
        with sluice.Client(url() + "/wrong/prefix") as client:
            d = client.check(key="k", limit=1, period="1s")
        self.assertFalse(d.allowed)
        self.assertIn("HTTP 404", d.error)

class LeaseTest(unittest.TestCase):
    export = dict(domain="api", descriptors=[{"job": "export"}])

    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def test_lease_held_in_the_block_and_released_when_it_raises(self):
        with self.assertRaisesRegex(RuntimeError, "boom"):
            with self.client.lease(**self.export) as held:
                self.assertIsNotNone(held.lease)
                self.assertEqual(held.lease_ttl, 600.0)
                full = self.client.check(**self.export)
                self.assertEqual((full.allowed, full.remaining), (False, 0))
                with self.assertRaises(sluice.RateLimited) as denied:
                    with self.client.lease(max_wait=0, **self.export):
                        self.fail("a second lease of a concurrency of 1")
                self.assertFalse(denied.exception.decision.allowed)
                raise RuntimeError("boom")
        # Given back: the only slot is free again at once.
        with self.client.lease(max_wait=0, **self.export) as again:
            self.assertTrue(again.allowed)
            token = again.lease
        self.assertFalse(self.client.release(token))  # Released already by the block's end.

    def test_release_answers_and_refuses_a_forged_token(self):
        d = self.client.acquire(max_wait=0, **self.export)
        self.assertTrue(d.allowed)
        self.assertTrue(self.client.release(d.lease))
        self.assertFalse(self.client.release(d.lease))
        with self.assertRaisesRegex(sluice.BadRequest, "lease"):
            self.client.release("forged")

    def test_lease_under_allow_policy_without_server(self):
        client = sluice.Client("http://127.0.0.1:%d" % sluiced.free_port(), on_error="allow")
        with client.lease(**self.export) as d:
            self.assertEqual((d.allowed, d.lease), (True, None))

    def test_a_failed_release_does_not_hide_the_blocks_exception(self):
        server = Answering({"/v1/acquire": lambda: GRANTED,
                            "/v1/release": lambda: (400, {"error": "unknown lease"})})
        self.addCleanup(server.close)
        client = sluice.Client(server.url)
        self.addCleanup(client.close)
        with self.assertLogs("sluice", "WARNING") as logged:
            with self.assertRaisesRegex(RuntimeError, "the block's own"):
                with client.lease(key="k", limit=1, period="1s"):
                    raise RuntimeError("the block's own")
        self.assertIn("unknown lease", "".join(logged.output))
        self.assertEqual(server.asked, ["/v1/acquire", "/v1/release"])

        async def main():
            with self.assertRaisesRegex(RuntimeError, "async block"):
                async with sluice.AsyncClient(server.url).lease(key="k", limit=1, period="1s"):
                    raise RuntimeError("async block")

        with self.assertLogs("sluice", "WARNING"):
            asyncio.run(main())

    def test_a_lease_granted_after_its_async_with_was_cancelled_is_given_back(self):
        asked, go_on, released = threading.Event(), threading.Event(), threading.Event()

        def acquire():
            asked.set()
            go_on.wait(30)
            return GRANTED

        def release():
            released.set()
            return 200, {"released": True}

        server = Answering({"/v1/acquire": acquire, "/v1/release": release})
        self.addCleanup(server.close)
        client = sluice.AsyncClient(server.url, timeout=30)
        self.addCleanup(client.close)

        async def main():
            async def hold():
                async with client.lease(key="k", limit=1, period="1s"):
                    self.fail("the block of a cancelled lease ran")

            task = asyncio.ensure_future(hold())
            self.assertTrue(await asyncio.to_thread(asked.wait, 30))
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            go_on.set()  # The acquire in its thread now gets its lease...
            self.assertTrue(await asyncio.to_thread(released.wait, 30))  # ...and gives it back.

        asyncio.run(main())
        self.assertEqual(server.asked, ["/v1/acquire", "/v1/release"])


class DecoratorTest(unittest.TestCase):
    def setUp(self):
        self.client = sluice.Client(url(), timeout=30)
        self.addCleanup(self.client.close)

    def test_raise_on_denial_and_the_function_does_not_run(self):
        calls = []

        @sluice.limited(self.client, wait=False, key="deco-raise", algorithm="sliding_log",
                        limit=2, period="1h")
        def work(x):
            calls.append(x)
            return x * 2

        self.assertEqual([work(1), work(2)], [2, 4])
        with self.assertRaises(sluice.RateLimited) as raised:
            work(3)
        self.assertEqual(calls, [1, 2])
        self.assertTrue(0 < raised.exception.decision.retry_after <= 3600)
        self.assertEqual(work.__name__, "work")

    def test_wait_with_a_key_per_call(self):
        calls = []

        @sluice.limited(self.client, key=lambda user: "deco-" + user, algorithm="sliding_log",
                        limit=1, period="200ms", max_wait=30)
        def work(user):
            calls.append(user)

        for user in ("ann", "ann", "ben"):
            work(user)
        self.assertEqual(calls, ["ann", "ann", "ben"])

        @sluice.limited(self.client, key="deco-far", algorithm="sliding_log", limit=1,
                        period="1h", max_wait=0)
        def far():
            calls.append("far")

        far()
        with self.assertRaises(sluice.RateLimited):
            far()
        self.assertEqual(calls.count("far"), 1)

    def test_the_asyncio_client_and_a_coroutine(self):
        client = sluice.AsyncClient(url(), timeout=30)
        self.addCleanup(client.close)

        @sluice.limited(client, wait=False, key="deco-async", algorithm="sliding_log", limit=1,
                        period="1h")
        async def work():
            return "ran"

        async def main():
            first = await client.check(key="async-check", limit=1, period="1h")
            second = await client.check(key="async-check", limit=1, period="1h")
            self.assertEqual((first.allowed, second.allowed), (True, False))
            self.assertEqual(await work(), "ran")
            with self.assertRaises(sluice.RateLimited):
                await work()
            with self.assertRaisesRegex(ValueError, "inside"):
                async with client.lease(**LeaseTest.export) as held:
                    self.assertIsNotNone(held.lease)
                    raise ValueError("inside")
            d = await client.acquire(max_wait=0, **LeaseTest.export)
            self.assertTrue(d.allowed)  # The async lease was given back.
            self.assertTrue(await client.release(d.lease))

        asyncio.run(main())

    def test_a_coroutine_with_a_sync_client_and_a_function_with_an_async_client(self):
        @sluice.limited(self.client, wait=False, key="deco-mixed-1", algorithm="sliding_log",
                        limit=1, period="1h")
        async def coroutine():
            return "coroutine ran"

        async def main():
            self.assertEqual(await coroutine(), "coroutine ran")
            with self.assertRaises(sluice.RateLimited):
                await coroutine()

        asyncio.run(main())

        async_client = sluice.AsyncClient(url(), timeout=30)
        self.addCleanup(async_client.close)

        @sluice.limited(async_client, key="deco-mixed-2", algorithm="sliding_log", limit=1,
                        period="1h", max_wait=0)
        def function():
            return "function ran"

        self.assertEqual(function(), "function ran")
        with self.assertRaises(sluice.RateLimited):
            function()
        with self.assertRaisesRegex(TypeError, "Client or AsyncClient"):
            sluice.limited(object(), key="k", limit=1, period="1s")(function)


class InstallTest(unittest.TestCase):
    def test_pip_installs_the_folder_in_a_venv_as_docs_python_md_says(self):
        # On the Python running this test: ctest runs it on pyenv's python3, which has no
        # `wheel` (setuptools then failed: "invalid command 'bdist_wheel'"), and on Debian's.
        # No index: the package builds itself (build_backend.py).
        work = tempfile.mkdtemp(prefix="sluice-pip-")
        self.addCleanup(shutil.rmtree, work, True)
        venv = os.path.join(work, ".venv")
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        python = os.path.join(venv, "bin", "python")
        install = subprocess.run([python, "-m", "pip", "install", "--no-index",
                                  os.path.join(ROOT, "clients", "python")],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(install.returncode, 0, install.stdout)
        code = ("import sluice, sys; print(sluice.__file__); "
                "print(sluice.Client(sys.argv[1]).check(key='pip', limit=1, period='1h').allowed)")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        out = subprocess.run([python, "-c", code, url()], check=True, cwd=work, env=env,
                             stdout=subprocess.PIPE, text=True).stdout.split()
        self.assertEqual(len(out), 2, out)
        self.assertTrue(out[0].startswith(os.path.join(venv, "lib")), out)  # Installed, a copy.
        self.assertEqual(out[1], "True")

if __name__ == "__main__":
    sluiced.main(verbosity=2)
