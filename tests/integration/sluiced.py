"""A sluiced process for the integration tests: started on a loopback port, asked over HTTP,
stopped with a signal. Standard library only; set BINARY before use.

Two ways to start one:
- Sluiced(workdir, *flags) starts it at once with workdir/rules.yaml (when there is one) and
  --threads 1, on a port it picks itself (--http 127.0.0.1:0; the port is read from its log,
  workdir/sluicedN.log, stdout and stderr together).
- Sluiced.with_rules(text, *flags, threads=N) writes `text` to rules.yaml in a temporary
  directory of its own; start() then runs it on a free port picked here (another if sluiced
  exits, as when some other process took the port first), with stdout and stderr in files of
  their own, and waits until /healthz answers. cleanup() kills it if need be and removes the
  directory. The HTTP tests use this one.
"""

import argparse
import http.client
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

BINARY = None
SLUICE = None  # The sluice command, for the tests that run it (main(sluice=True)).

# How long sluiced waits for Redis in the tests that are not about Redis's timeout: the
# default, 100 ms, is a production choice; on a loaded test machine a redis-server not
# scheduled for that long made a decision 503 (or fall back) that the test did not expect.
REDIS_TIMEOUT = "30s"


def with_redis_timeout(flags):
    """`flags` with --redis-timeout REDIS_TIMEOUT unless they already set one."""
    flags = list(flags)
    return flags if "--redis-timeout" in flags else [*flags, "--redis-timeout", REDIS_TIMEOUT]


def away_from_edge(period, margin):
    """Waits past the next boundary of real time's `period`-second windows (a fixed window's,
    aligned to the epoch) when it is less than `margin` seconds away, so that a sequence of
    requests started here sees one window, however slowly a loaded machine runs it."""
    left = period - time.time() % period
    if left < margin:
        time.sleep(left + 0.1)


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listens(pid, port, any_address=False):
    """Whether process `pid` holds the socket listening on 127.0.0.1:`port` (Linux's /proc); with
    `any_address`, on `port` at any address, over IPv4 or IPv6 (gRPC's listener)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6") if any_address else ("/proc/net/tcp",):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local = fields[1].endswith(":%04X" % port) if any_address else (
                    fields[1] == "0100007F:%04X" % port)
                if local and fields[3] == "0A":  # 0A: LISTEN.
                    inodes.add("socket:[%s]" % fields[9])
    fds = "/proc/%d/fd" % pid
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            if os.readlink(os.path.join(fds, name)) in inodes:
                return True
        except OSError:
            pass
    return False


class Response:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # http.client.HTTPMessage: case-insensitive get().
        self.body = body

    def header(self, name):
        return self.headers.get(name)

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "HTTP %d %s %r" % (self.status, dict(self.headers), self.body[:600])


def engine_flags():
    """--grpc-engine as SLUICE_TEST_GRPC_ENGINE names it: ctest runs the gRPC tests once per
    engine (tests/CMakeLists.txt); none when it is not set (sluiced's default)."""
    engine = os.environ.get("SLUICE_TEST_GRPC_ENGINE")
    return ["--grpc-engine", engine] if engine else []


class Sluiced:
    """One sluiced process on a loopback port, with the given flags (snapshot, store, ...)."""

    started = 0

    def __init__(self, workdir, *flags, threads=1, start=True, nofile=None):
        """Starts sluiced with workdir/rules.yaml (when there is one) and `flags`; with
        start=False, start() starts it (see the module's paragraph). `nofile`: its
        RLIMIT_NOFILE, soft and hard, when given."""
        self.workdir = workdir
        self.config = os.path.join(workdir, "rules.yaml")
        self.flags = list(flags)
        self.threads = threads
        self.nofile = nofile
        self.log = None  # Stdout and stderr, when started at once.
        self.out = self.err = None  # Each on its own, when started by start().
        self.proc = None
        self.port = None
        self.timeouts = 0
        self.env = None  # start()'s process's whole environment; None: the test's own.
        if start:
            Sluiced.started += 1
            # Appending: sluiced shares this open file (and so its offset) with us, and we seek
            # to its start to read it; opened "w+", a line sluiced wrote just then went over
            # the first lines (the port's line once, so the start was never seen).
            self.log = open(os.path.join(workdir, f"sluiced{Sluiced.started}.log"), "a+")
            self.proc = subprocess.Popen(self._command(0), stdout=self.log, stderr=self.log,
                                         preexec_fn=self._preexec())
            self.port = self._await_port()

    @classmethod
    def with_rules(cls, rules_text, *flags, threads=1, nofile=None):
        """A sluiced, not started yet, with `rules_text` in a temporary directory."""
        workdir = tempfile.mkdtemp(prefix="sluiced-itest-")
        with open(os.path.join(workdir, "rules.yaml"), "w") as f:
            f.write(rules_text)
        return cls(workdir, *flags, threads=threads, start=False, nofile=nofile)

    def _preexec(self):
        """What the child runs before sluiced: sets its RLIMIT_NOFILE, when asked to."""
        if self.nofile is None:
            return None
        nofile = self.nofile
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    def _command(self, port):
        config = ["--config", self.config] if os.path.exists(self.config) else []
        return [BINARY, "--http", "127.0.0.1:%d" % port, "--grpc", "127.0.0.1:0", "--threads",
                str(self.threads), *engine_flags(), *config, *self.flags]

    def _await_port(self):
        # 120 s: sluiced starts in tens of milliseconds, but a 2-core CI machine running other
        # tests beside this one has been seen to take over 10 s to let it.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            self.log.seek(0)
            found = re.findall(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if found:
                return int(found[-1])
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"sluiced exited with {self.proc.returncode}: {self.output()[-2000:]}")
            time.sleep(0.02)
        raise AssertionError(f"sluiced did not start in 120 s: {self.output()[-2000:]}")

    def start(self, timeout=120.0, any_status=False):
        """Starts sluiced on a free port and waits until it answers /healthz there (200, or
        with any_status any answer: a store out of reach makes it 503); returns self. A test
        running beside this one may take the port first: this sluiced then exits (and another
        port is tried) while the other answers, so an answer counts only once this process
        holds the listening socket."""
        for attempt in range(3):
            if attempt > 0:
                self.out.close()
                self.err.close()
            self.port = free_port()
            self.out = open(os.path.join(self.workdir, "stdout"), "wb")
            self.err = open(os.path.join(self.workdir, "stderr"), "wb")
            self.proc = subprocess.Popen(self._command(self.port), stdout=self.out,
                                         stderr=self.err, stdin=subprocess.DEVNULL, env=self.env,
                                         preexec_fn=self._preexec())
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    status = self.request("GET", "/healthz", timeout=1).status
                    if (status == 200 or any_status) and listens(self.proc.pid, self.port):
                        self.timeouts = 0
                        return self
                except OSError:
                    self.timeouts = 0
                time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("sluiced did not answer /healthz within %.0fs:\n%s"
                                   % (timeout, self.output()))
        raise RuntimeError("sluiced exited at start-up (rc %s):\n%s"
                           % (self.proc.returncode, self.output()))

    def check(self, user, domain="snap", timeout=60):
        """POST /v1/check for descriptor user=`user`: (status, answer)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        body = json.dumps({"domain": domain,
                           "descriptors": [{"entries": [{"key": "user", "value": user}]}]})
        conn.request("POST", "/v1/check", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        conn.close()
        return response.status, answer

    def request(self, method, path, body=None, headers=None, timeout=60):
        # A server that stops answering fails each test quickly instead of timing out on
        # every request: after three timeouts, further requests fail at once.
        if self.timeouts >= 3:
            raise TimeoutError("sluiced on port %d stopped answering (3 requests timed out)"
                               % self.port)
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body)
            if isinstance(body, str):
                body = body.encode()
            hdrs = dict(headers or {})
            if body is not None:
                hdrs.setdefault("Content-Type", "application/json")
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return Response(resp.status, resp.headers, data)
        except TimeoutError:
            self.timeouts += 1
            raise
        finally:
            conn.close()

    def connect(self, timeout=10):
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def metrics(self):
        resp = self.request("GET", "/metrics")
        assert resp.status == 200, resp
        return resp.body.decode()

    def metric(self, series, text=None):
        """The value of one series, e.g. 'sluice_rule_checks_total{rule="x"}'; None if absent."""
        text = self.metrics() if text is None else text
        m = re.search(r"^%s (\S+)$" % re.escape(series), text, re.M)
        return float(m.group(1)) if m else None

    def rules_limit(self, path):
        """The limits /v1/rules shows for the rule at `path`, or None."""
        for domain in self.request("GET", "/v1/rules").json()["domains"]:
            for rule in domain["rules"]:
                if rule["path"] == path:
                    return rule["limits"]
        return None

    def stop(self, sig=signal.SIGTERM):
        """Sends `sig` and returns the exit code.

        Started at once: waits up to 60 s for it. Started by start(): only if still running,
        and after 60 s kills it and returns a string saying so.
        """
        if self.log is not None:
            self.proc.send_signal(sig)
            code = self.proc.wait(timeout=60)
            self.log.close()
            return code
        if self.proc is None:
            return None
        timeout = 60.0
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(sig)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    return "hung (killed %.0f s after SIGTERM)" % timeout
            return self.proc.returncode
        finally:
            self._close_logs()

    def _close_logs(self):
        for log in (self.log, self.out, self.err):
            if log is not None:
                log.close()

    def cleanup(self):
        """Kills sluiced if still running and removes its directory (made by with_rules)."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._close_logs()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def output(self):
        if self.log is not None:
            with open(self.log.name) as f:
                return f.read()
        text = ""
        for name in ("stdout", "stderr"):
            try:
                with open(os.path.join(self.workdir, name), "rb") as f:
                    text += "--- %s ---\n%s\n" % (name, f.read().decode(errors="replace")[-3000:])
            except OSError:
                pass
        return text


def assert_one_limit_shared(test, a, b, domain="fleet"):
    """Checks that sluiced `a` and `b`, on one shared store, enforce one limit of 5 per hour on
    descriptor user: five admissions in turn, each taking its own place in the one quota, then
    denials from both; another user's quota untouched."""
    answers = [server.check("ann", domain=domain) for server in (a, b, a, b, a)]
    test.assertEqual([status for status, _ in answers], [200] * 5)
    # Each admission took its own place in the one quota: 4, 3, 2, 1, 0 left.
    test.assertEqual(sorted(answer["remaining"] for _, answer in answers), [0, 1, 2, 3, 4])
    for server in (a, b):
        status, answer = server.check("ann", domain=domain)
        test.assertEqual(status, 429, answer)
    status, answer = b.check("bob", domain=domain)
    test.assertEqual((status, answer["remaining"]), (200, 4))


def main(verbosity=1, sluice=False):
    """Runs the calling test file's tests against the sluiced of --sluiced PATH (BINARY) and,
    with sluice=True, the sluice command of --sluice PATH (SLUICE): the one entry point of the
    integration tests."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--sluiced", required=True)
    if sluice:
        parser.add_argument("--sluice", required=True)
    args, rest = parser.parse_known_args()
    global BINARY, SLUICE
    BINARY = os.path.abspath(args.sluiced)
    if sluice:
        SLUICE = os.path.abspath(args.sluice)
    unittest.main(module="__main__", argv=[sys.argv[0], *rest], verbosity=verbosity)
