#!/usr/bin/env python3
"""nginx auth_request in front of an application, checked by sluiced's GET /v1/auth.

    python3 tests/integration/nginx_test.py --sluiced build/bin/sluiced [--nginx nginx] [-v]

Fills in examples/nginx/nginx.conf (the template) and runs, for each test, its own:
  * an upstream application: a Python HTTP/1.1 server answering "hello" and counting hits,
  * sluiced on a free port (--http 127.0.0.1:0; the port is read from its log), with a
    rules file written here: 3 requests per minute per client address (auth: x-real-ip),
  * nginx (`nginx -p PREFIX -c CONF -g 'daemon off;'`, everything under a temporary PREFIX).
As root, nginx's workers run as nobody (a `user` line is added and PREFIX is made
world-readable); otherwise nginx runs as the current user with no `user` line.

Other arguments go to unittest. Needs nginx with the auth_request module (`nginx -V`:
--with-http_auth_request_module); the tests are skipped without it.
"""

from __future__ import annotations

import argparse
import grp
import http.client
import http.server
import json
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import sluiced

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATE = os.path.join(ROOT, "examples", "nginx", "nginx.conf")

ARGS = argparse.Namespace(sluiced=None, nginx="nginx")

RULES = """\
domain: edge
auth:
  - - {key: remote_address, header: x-real-ip}
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 3}
"""


free_port = sluiced.free_port


def wait_for_port(port: int, proc: subprocess.Popen, what: str, log: str, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{read(log)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s:\n{read(log)}")


def read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def stop(proc: subprocess.Popen | None, sig=signal.SIGTERM):
    """Stops one process this test started (nginx: SIGTERM is its fast shutdown)."""
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Upstream:
    """The application: GET/POST answer 200 "hello", /forbidden answers 403; counts hits."""

    def __init__(self):
        self.hits = 0
        self.lock = threading.Lock()
        upstream = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive with nginx's upstream keepalive

            def _answer(self):
                with upstream.lock:
                    upstream.hits += 1
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                status, body = (403, b"no\n") if self.path == "/forbidden" else (200, b"hello")
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_POST = do_HEAD = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def count(self) -> int:
        with self.lock:
            return self.hits

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Stack:
    """Upstream, sluiced and nginx in a temporary directory; close() stops them all."""

    def __init__(self, fail_open=True, start_sluiced=True):
        self.dir = tempfile.mkdtemp(prefix="sluice-nginx-")
        self.upstream = None
        self.sluiced = None
        self.nginx = None
        try:
            self._start(fail_open, start_sluiced)
        except BaseException:
            self.close()
            raise

    def _start(self, fail_open, start_sluiced):
        self.upstream = Upstream()
        self.rules = os.path.join(self.dir, "rules.yaml")
        with open(self.rules, "w") as f:
            f.write(RULES)
        self.sluiced_log = os.path.join(self.dir, "sluiced.log")
        if start_sluiced:
            self.sluiced_port = self._start_sluiced()
        else:
            self.sluiced_port = free_port()  # nothing listens there
        self.prefix = os.path.join(self.dir, "nginx")
        os.mkdir(self.prefix)
        self.error_log = os.path.join(self.prefix, "error.log")
        self._start_nginx(fail_open)

    def _start_sluiced(self) -> int:
        log = open(self.sluiced_log, "w")
        self.sluiced = subprocess.Popen(
            [ARGS.sluiced, "--config", self.rules, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--threads", "1",
             "--drain", "0s"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 120  # A loaded machine may take seconds to start it.
        while time.monotonic() < deadline:
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", read(self.sluiced_log))
            if m:
                return int(m.group(1))
            if self.sluiced.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"sluiced did not start:\n{read(self.sluiced_log)}")

    def _config(self, fail_open: bool) -> str:
        text = read(TEMPLATE)
        if not fail_open:
            # The template marks the lines that make it fail open; without them nginx's
            # auth_request answers 500 when the subrequest fails.
            text = "\n".join(l for l in text.splitlines() if "# fail-open" not in l) + "\n"
        for name, value in (("@PREFIX@", self.prefix), ("@LISTEN_PORT@", str(self.port)),
                            ("@SLUICED_PORT@", str(self.sluiced_port)),
                            ("@UPSTREAM_PORT@", str(self.upstream.port))):
            text = text.replace(name, value)
        # The example gives up on sluiced after 1 s and lets the request through without
        # RateLimit headers (its production choice); on a loaded test machine sluiced may take
        # longer, and the tests below assert its headers: wait for it as long as the client.
        for setting in ("proxy_connect_timeout 250ms;", "proxy_read_timeout 1s;",
                        "proxy_send_timeout 1s;"):
            assert setting in text, f"{setting} no longer in {TEMPLATE}"
            text = text.replace(setting, setting.split()[0] + " 30s;")
        leftover = re.findall(r"@[A-Z_]+@", text)
        assert not leftover, f"unfilled placeholders: {leftover}"
        if os.geteuid() == 0:
            # A root master switches its workers to an unprivileged user: name it, and let it
            # reach PREFIX (the master creates the temp directories and hands them over).
            try:
                user = pwd.getpwnam("nobody")
                text = f"user nobody {grp.getgrgid(user.pw_gid).gr_name};\n" + text
                os.chmod(self.dir, 0o755)
                os.chmod(self.prefix, 0o755)
            except KeyError:
                text = "user root;\n" + text
        return text

    def _start_nginx(self, fail_open: bool):
        for attempt in range(3):  # the free port may be taken before nginx binds it
            self.port = free_port()
            self.conf = os.path.join(self.prefix, "nginx.conf")
            with open(self.conf, "w") as f:
                f.write(self._config(fail_open))
            out = os.path.join(self.prefix, "nginx.out")
            with open(out, "w") as log:
                self.nginx = subprocess.Popen(
                    [ARGS.nginx, "-p", self.prefix + "/", "-c", self.conf, "-g", "daemon off;"],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            try:
                wait_for_port(self.port, self.nginx, "nginx", out)
                return
            except RuntimeError:
                if "Address already in use" in read(out) + read(self.error_log) and attempt < 2:
                    stop(self.nginx)
                    continue
                raise RuntimeError(f"nginx failed:\n{read(out)}\n{read(self.error_log)}")

    def get(self, path="/", method="GET", body=None, headers=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def stop_sluiced(self):
        stop(self.sluiced)

    def close(self):
        stop(self.nginx)
        stop(self.sluiced)
        if self.upstream is not None:
            self.upstream.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def away_from_minute_edge():
    """The rule is a fixed window aligned to the minute: start a sequence well inside one (20 s
    for a few requests, even on a loaded machine)."""
    sluiced.away_from_edge(60, 20)


class NginxAuthRequestTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not ARGS.sluiced:
            raise unittest.SkipTest("--sluiced PATH not given")
        nginx = shutil.which(ARGS.nginx)
        if nginx is None:
            raise unittest.SkipTest(f"{ARGS.nginx} not found")
        version = subprocess.run([nginx, "-V"], capture_output=True, text=True)
        if "--with-http_auth_request_module" not in version.stdout + version.stderr:
            raise unittest.SkipTest(f"{nginx} lacks the auth_request module")

    def stack(self, **kwargs) -> Stack:
        s = Stack(**kwargs)
        self.addCleanup(s.close)
        return s

    def test_three_allowed_then_429_without_reaching_upstream(self):
        s = self.stack()
        away_from_minute_edge()
        for remaining in (2, 1, 0):
            status, headers, body = s.get("/")
            self.assertEqual((status, body), (200, b"hello"))
            self.assertRegex(headers.get("ratelimit-policy", ""), r'^"[^"]+";q=3;w=60$')
            self.assertRegex(headers.get("ratelimit", ""), r'^"[^"]+";r=%d;t=[0-9]+$' % remaining)
            self.assertNotIn("ratelimit-limit", headers)  # draft-06's: not sent by default.
            self.assertNotIn("retry-after", headers)
        self.assertEqual(s.upstream.count(), 3)

        # The client's own X-Real-IP is replaced by nginx's $remote_addr: no way around it.
        for spoof in ({}, {"X-Real-IP": "203.0.113.9"}):
            status, headers, body = s.get("/", headers=spoof)
            self.assertEqual(status, 429, body)
            retry = headers.get("retry-after", "")
            self.assertRegex(retry, r"^[0-9]+$", headers)
            self.assertGreaterEqual(int(retry), 1)
            self.assertLessEqual(int(retry), 60)
            self.assertRegex(headers.get("ratelimit", ""), r'^"[^"]+";r=0;t=[0-9]+$')
            self.assertRegex(headers.get("ratelimit-policy", ""), r'^"[^"]+";q=3;w=60$')
            self.assertEqual(json.loads(body), {"error": "rate limited"})
        self.assertEqual(s.upstream.count(), 3, "a denied request reached the upstream")
        self.assertNotIn("[error]", read(s.error_log))

    def test_request_body_and_method_are_not_sent_to_sluiced(self):
        # sluiced's /v1/auth accepts only GET and HEAD; proxy_method GET covers POST etc.
        s = self.stack()
        away_from_minute_edge()
        status, headers, body = s.get("/upload", method="POST", body=b"x" * 100_000,
                                      headers={"Content-Type": "application/octet-stream"})
        self.assertEqual((status, body), (200, b"hello"))
        self.assertRegex(headers.get("ratelimit", ""), r'";r=2;')
        status, headers, _ = s.get("/", method="HEAD")
        self.assertEqual(status, 200)
        self.assertRegex(headers.get("ratelimit", ""), r'";r=1;')

    def test_upstream_403_is_not_turned_into_429(self):
        s = self.stack()
        away_from_minute_edge()
        status, headers, body = s.get("/forbidden")
        self.assertEqual((status, body), (403, b"no\n"))
        self.assertNotIn("retry-after", headers)
        self.assertRegex(headers.get("ratelimit", ""), r'";r=2;')  # added with `always`

    def test_sluiced_down_fails_open(self):
        # The template's choice: sluiced unreachable -> the request goes through, unlimited,
        # without RateLimit headers, and nginx logs the error.
        s = self.stack()
        status, headers, _ = s.get("/")
        self.assertEqual(status, 200)
        self.assertIn("ratelimit", headers)
        s.stop_sluiced()
        for _ in range(5):  # more than the limit: nothing limits now
            status, headers, body = s.get("/")
            self.assertEqual((status, body), (200, b"hello"))
            self.assertNotIn("ratelimit", headers)
            self.assertNotIn("ratelimit-policy", headers)
            self.assertNotIn("retry-after", headers)
        self.assertEqual(s.upstream.count(), 6)
        self.assertIn("while connecting to upstream", read(s.error_log))

    def test_sluiced_down_without_fail_open_lines_is_500(self):
        # nginx's default (the two `# fail-open` lines removed): auth_request answers 500.
        s = self.stack(fail_open=False, start_sluiced=False)
        status, headers, _ = s.get("/")
        self.assertEqual(status, 500)
        self.assertEqual(s.upstream.count(), 0)
        self.assertIn("Connection refused", read(s.error_log))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=False)
    parser.add_argument("--sluiced", help="path of the sluiced binary")
    parser.add_argument("--nginx", default="nginx", help="nginx binary (default: nginx)")
    args, rest = parser.parse_known_args()
    ARGS.sluiced = os.path.abspath(args.sluiced) if args.sluiced else None
    ARGS.nginx = args.nginx
    unittest.main(argv=[sys.argv[0]] + rest)


if __name__ == "__main__":
    main()
