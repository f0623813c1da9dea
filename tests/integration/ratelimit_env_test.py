#!/usr/bin/env python3
"""sluiced started as envoyproxy/ratelimit is: with their environment variables alone.

Each test lays out their runtime directory (ROOT/current, a symlink to a version directory,
then SUBDIRECTORY ratelimit, then config/ with a YAML file), starts a redis-server of its own
and sluiced with no flags but what the case says, its settings in the environment only. Then
/healthcheck (200 "OK", 500 while Redis is down), POST /json, the debug port's /rlconfig, a
swap of the symlink reloaded, a flag beside its variable winning, a malformed variable
refused, switches (SHADOW_MODE, MERGE_DOMAIN_CONFIG) reaching their flags, and their
BACKEND_TYPE=memcache on a memcached of its own (MEMCACHE_HOST_PORT). Python 3
standard library only.

    python3 tests/integration/ratelimit_env_test.py --sluiced build/bin/sluiced
"""

import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import http_fixture
import sluiced
from memcached_test import Memcached
from redis_test import Redis

RULES = """domain: rl
descriptors:
  - key: foo
    rate_limit: {unit: hour, requests_per_unit: %d}
"""

# Variables of the test's own environment that sluiced may need (sanitizer options), kept;
# everything else is left out, so that only the case's variables are set.
KEPT = ("PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS")


def get(port, path, timeout=60):
    """(status, body) of GET `path` on 127.0.0.1:`port`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def post_json(port, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("POST", "/json", json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        conn.close()


def eventually(probe, want, what, seconds=60):
    """Calls probe() until it returns `want`; fails with the last value after `seconds`."""
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        try:
            last = probe()
            if last == want:
                return
        except OSError as e:
            last = e
        time.sleep(0.05)
    raise AssertionError(f"{what}: still {last!r} after {seconds} s, expected {want!r}")


class Process:
    """sluiced run with `variables` as its whole environment and `args` as its command line."""

    def __init__(self, workdir, variables, args=()):
        env = {name: os.environ[name] for name in KEPT if name in os.environ}
        env.update(variables)
        self.log_path = os.path.join(workdir, "sluiced-%d.log" % time.monotonic_ns())
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sluiced.BINARY, *args], env=env, stdout=self.log,
                                     stderr=self.log, stdin=subprocess.DEVNULL)

    def output(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def wait_listening(self, port):
        """Waits until /healthcheck on `port` answers (any status, so the debug listener's 404
        will do); False if sluiced exited."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                get(port, "/healthcheck", timeout=1)
                return True
            except OSError:
                time.sleep(0.05)
        raise AssertionError("sluiced did not answer in 120 s:\n" + self.output()[-3000:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class RatelimitEnvironmentTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluice-env-test.")
        self.root = os.path.join(self.workdir, "runtime")
        self.write_version("v1", 2)
        os.symlink("v1", os.path.join(self.root, "current"))
        self.processes = []
        self.redis = None

    def tearDown(self):
        codes = [process.stop() for process in self.processes]
        if self.redis is not None and self.redis.proc.poll() is None:
            self.redis.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        # A clean exit after SIGTERM (also under the sanitizers, which exit 66 on a report),
        # or the refusal a case expected.
        self.assertTrue(all(code in (0, 2) for code in codes), codes)

    def write_version(self, name, requests_per_unit):
        config = os.path.join(self.root, name, "ratelimit", "config")
        os.makedirs(config)
        with open(os.path.join(config, "rules.yaml"), "w") as f:
            f.write(RULES % requests_per_unit)

    def swap_current(self, name):
        """Points current at `name` as their deployments do: a new link renamed over it."""
        link = os.path.join(self.root, "current.new")
        os.symlink(name, link)
        os.replace(link, os.path.join(self.root, "current"))

    def their_variables(self, **extra):
        """Their settings for a deployment on loopback: ports picked here, the runtime
        directory, statsd off. PORT, GRPC_PORT and DEBUG_PORT are in the result."""
        variables = {
            "HOST": "127.0.0.1", "PORT": str(sluiced.free_port()),
            "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(sluiced.free_port()),
            "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": str(sluiced.free_port()),
            "RUNTIME_ROOT": os.path.join(self.root, "current"),
            "RUNTIME_SUBDIRECTORY": "ratelimit",
            "RUNTIME_WATCH_ROOT": "true",
            "USE_STATSD": "false",
            "LOG_LEVEL": "INFO",
        }
        variables.update(extra)
        return variables

    def start(self, variables, args=()):
        """sluiced with `variables`; None when it exited at start (its log is kept)."""
        for _ in range(3):  # Another process may take a port picked here first: pick again.
            process = Process(self.workdir, variables, args)
            self.processes.append(process)
            port = (int(args[args.index("--http") + 1].rsplit(":", 1)[1]) if "--http" in args
                    else int(variables["PORT"]))
            # The debug listener starts last: once it answers, every listener does.
            if process.wait_listening(port) and (
                    "DEBUG_PORT" not in variables or
                    process.wait_listening(int(variables["DEBUG_PORT"]))):
                return process
            if "in use" not in process.output():
                return None
            for name in ("PORT", "GRPC_PORT", "DEBUG_PORT"):
                if name in variables:
                    variables[name] = str(sluiced.free_port())
        raise AssertionError("no free ports in 3 tries")

    def assert_serves_the_rules(self, variables, process):
        port, debug = int(variables["PORT"]), int(variables["DEBUG_PORT"])
        eventually(lambda: get(port, "/healthcheck"), (200, "OK"), "/healthcheck")
        request = {"domain": "rl", "descriptors": [{"entries": [{"key": "foo", "value": "a"}]}]}
        # An hourly window (a minute's turned under a slow sequence on a loaded machine).
        sluiced.away_from_edge(3600, 60)
        status, answer = post_json(port, request)
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["overallCode"], "OK")
        self.assertEqual(answer["statuses"][0]["currentLimit"],
                         {"requestsPerUnit": 2, "unit": "HOUR"})
        self.assertEqual(answer["statuses"][0]["limitRemaining"], 1)
        post_json(port, request)
        status, answer = post_json(port, request)
        self.assertEqual((status, answer["overallCode"]), (429, "OVER_LIMIT"), answer)
        self.assertEqual(
            get(debug, "/rlconfig"),
            (200, "rl.foo: unit=HOUR requests_per_unit=2, shadow_mode: false, "
                  "quota_mode: false\n"), process.output()[-2000:])

    def test_their_environment_over_tcp(self):
        self.redis = Redis(self.workdir)
        variables = self.their_variables(REDIS_SOCKET_TYPE="tcp",
                                         REDIS_URL="127.0.0.1:%d" % self.redis.port,
                                         REDIS_TIMEOUT=sluiced.REDIS_TIMEOUT)
        process = self.start(variables)
        self.assertIsNotNone(process, "sluiced refused to start")
        self.assert_serves_the_rules(variables, process)
        port, debug = int(variables["PORT"]), int(variables["DEBUG_PORT"])

        # A new version swapped in through the symlink, its file as large as the old one and
        # its times the old ones' (as a copy that keeps times leaves them): it is reloaded.
        self.write_version("v2", 7)
        for old, new in (("v1/ratelimit/config/rules.yaml", "v2/ratelimit/config/rules.yaml"),
                         ("v1/ratelimit/config", "v2/ratelimit/config")):
            stat = os.stat(os.path.join(self.root, old))
            os.utime(os.path.join(self.root, new), ns=(stat.st_atime_ns, stat.st_mtime_ns))
        self.swap_current("v2")
        eventually(lambda: get(debug, "/rlconfig")[1],
                   "rl.foo: unit=HOUR requests_per_unit=7, shadow_mode: false, "
                   "quota_mode: false\n", "/rlconfig after the swap")

        # Redis down: sluiced cannot decide, and says so; back up: healthy again.
        self.redis.stop()
        eventually(lambda: get(port, "/healthcheck")[0], 500, "/healthcheck without Redis")
        self.redis.start()
        eventually(lambda: get(port, "/healthcheck"), (200, "OK"), "/healthcheck with Redis")
        self.assertEqual(process.stop(), 0, process.output()[-2000:])

    def test_their_memcache_backend(self):
        memcached = Memcached()
        try:
            variables = self.their_variables(BACKEND_TYPE="memcache",
                                             MEMCACHE_HOST_PORT=memcached.address,
                                             REDIS_URL="127.0.0.1:1",
                                             REDIS_TIMEOUT=sluiced.REDIS_TIMEOUT)
            process = self.start(variables)
            self.assertIsNotNone(process, self.processes[-1].output()[-2000:])
            self.assert_serves_the_rules(variables, process)
            self.assertIn('"store":"memcached"', get(int(variables["PORT"]), "/healthz")[1])
            self.assertIn("REDIS_URL (BACKEND_TYPE is memcache)", process.output())
            self.assertEqual(memcached.items(), 1)  # The key's state is in memcached.
        finally:
            memcached.kill()

    def test_their_environment_over_a_unix_socket(self):
        socket_path = os.path.join(self.workdir, "redis.sock")
        self.redis = Redis(self.workdir, "--unixsocket", socket_path, "--unixsocketperm", "700")
        # REDIS_SOCKET_TYPE unset: unix, their default.
        variables = self.their_variables(REDIS_URL=socket_path,
                                         REDIS_TIMEOUT=sluiced.REDIS_TIMEOUT)
        process = self.start(variables)
        self.assertIsNotNone(process, self.processes[-1].output()[-2000:])
        self.assert_serves_the_rules(variables, process)

    def test_a_flag_wins_over_its_variable(self):
        http_port = sluiced.free_port()
        # PORT is malformed, but --http is given: PORT is not even read.
        variables = self.their_variables(PORT="abc", REDIS_SOCKET_TYPE="tcp",
                                         REDIS_URL="127.0.0.1:1")
        process = self.start(variables, ["--http", "127.0.0.1:%d" % http_port, "--store",
                                         "memory"])
        self.assertIsNotNone(process, self.processes[-1].output()[-2000:])
        # The memory store of --store beats REDIS_URL (a port where no Redis listens).
        self.assertEqual(get(http_port, "/healthcheck"), (200, "OK"))
        self.assertIn("memory store", process.output())

    def test_switches_reach_their_flags(self):
        # A second file of the same domain: refused unless MERGE_DOMAIN_CONFIG merges it.
        with open(os.path.join(self.root, "v1", "ratelimit", "config", "more.yaml"), "w") as f:
            f.write("domain: rl\ndescriptors:\n  - key: bar\n"
                    "    rate_limit: {unit: hour, requests_per_unit: 5}\n")
        variables = self.their_variables(SHADOW_MODE="True", MERGE_DOMAIN_CONFIG="1")
        process = self.start(variables, ["--store", "memory"])
        self.assertIsNotNone(process, self.processes[-1].output()[-2000:])
        port, debug = int(variables["PORT"]), int(variables["DEBUG_PORT"])
        # Files load in name order: more.yaml, then rules.yaml.
        self.assertEqual(get(debug, "/rlconfig")[1].splitlines(), [
            "rl.bar: unit=HOUR requests_per_unit=5, shadow_mode: false, quota_mode: false",
            "rl.foo: unit=HOUR requests_per_unit=2, shadow_mode: false, quota_mode: false"])
        request = {"domain": "rl", "descriptors": [{"entries": [{"key": "foo", "value": "a"}]}]}
        answers = [post_json(port, request) for _ in range(3)]
        # Over the limit at the third, but in shadow mode: never OVER_LIMIT overall.
        self.assertEqual([(status, answer["overallCode"]) for status, answer in answers],
                         [(200, "OK")] * 3, answers)

    def test_malformed_variables_are_refused_by_name(self):
        cases = [({"PORT": "abc"}, "PORT=abc"),
                 ({"SHADOW_MODE": "maybe"}, "SHADOW_MODE=maybe"),
                 ({"REDIS_TIMEOUT": "soon"}, "REDIS_TIMEOUT=soon"),
                 ({"REDIS_TYPE": "SENTINEL"}, "with REDIS_TYPE=SENTINEL, expected master-name"),
                 ({"BACKEND_TYPE": "memcache"}, "MEMCACHE_HOST_PORT is not set"),
                 ({"BACKEND_TYPE": "memcache", "MEMCACHE_SRV": "_memcache._tcp.example"},
                  "MEMCACHE_SRV=_memcache._tcp.example: sluiced does not discover")]
        for extra, message in cases:
            variables = self.their_variables(REDIS_SOCKET_TYPE="tcp", REDIS_URL="127.0.0.1:1",
                                             **extra)
            process = Process(self.workdir, variables)
            self.assertEqual(process.proc.wait(timeout=30), 2, extra)
            process.log.close()
            self.assertIn(message, process.output(), extra)

    def test_healthcheck_waits_for_rules_when_asked(self):
        self.redis = Redis(self.workdir)
        empty = os.path.join(self.root, "v0", "ratelimit", "config")
        os.makedirs(empty)
        self.swap_current("v0")
        variables = self.their_variables(REDIS_SOCKET_TYPE="tcp",
                                         REDIS_URL="127.0.0.1:%d" % self.redis.port,
                                         REDIS_TIMEOUT=sluiced.REDIS_TIMEOUT,
                                         HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED="true")
        process = self.start(variables)
        self.assertIsNotNone(process, self.processes[-1].output()[-2000:])
        port = int(variables["PORT"])
        eventually(lambda: get(port, "/healthcheck"), (500, "no rules are loaded\n"),
                   "/healthcheck without rules")
        self.swap_current("v1")
        eventually(lambda: get(port, "/healthcheck"), (200, "OK"), "/healthcheck with rules")


if __name__ == "__main__":
    http_fixture.main(__doc__)
