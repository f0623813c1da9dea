#!/usr/bin/env python3
"""sluiced refuses a numeric or duration flag out of its range, naming the flag, the value and
what is accepted: negative counts (which once read as 2^64-1), absurd thread counts, intervals
short enough to keep a core busy; from the command line and from envoyproxy/ratelimit's
environment variables; flags that cannot go together, naming both. Values at the edges of the
ranges start. Python 3 standard library only.

    python3 tests/integration/flags_test.py --sluiced build/bin/sluiced
"""

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import unittest

import sluiced

# (flags, what stderr must say). Every message also says what is accepted.
BAD_FLAGS = [
    (["--max-keys", "-1"], "--max-keys '-1': not a whole number"),
    (["--max-keys", "99999999999999999999"], "--max-keys '99999999999999999999'"),
    (["--max-keys", "100000000000"], "--max-keys '100000000000': must be at most 10000000000"),
    (["--threads", "100000"], "--threads '100000': must be at most 1024"),
    (["--threads", "-2"], "--threads '-2'"),
    (["--watch-interval", "1us"], "--watch-interval '1us': must be at least 100ms"),
    (["--watch-interval", "-1s"], "--watch-interval '-1s'"),
    (["--watch-interval", "400d"], "--watch-interval '400d': must be at most 1d"),
    (["--snapshot", "x.snap", "--snapshot-interval", "1ms"],
     "--snapshot-interval '1ms': must be at least 100ms"),
    (["--drain", "2d"], "--drain '2d': must be at most 1h"),
    (["--redis-timeout", "0s"], "--redis-timeout '0s': must be at least 1ms"),
    (["--redis-timeout", "1h"], "--redis-timeout '1h': must be at most 5m"),
    (["--redis-connections", "0"], "--redis-connections '0': must be at least 1"),
    (["--redis-connections", "100000"], "--redis-connections '100000': must be at most 64"),
    (["--redis-deny-cache", "-1"], "--redis-deny-cache '-1'"),
    (["--redis-deny-cache-ttl", "0s"], "--redis-deny-cache-ttl '0s': must be at least 1ms"),
    (["--near-limit-ratio", "1.5"], "--near-limit-ratio '1.5': not a number from 0 to 1"),
    (["--near-limit-ratio", "-0.1"], "--near-limit-ratio '-0.1'"),
    (["--statsd", "127.0.0.1:8125", "--statsd-interval", "1us"],
     "--statsd-interval '1us': must be at least 10ms"),
]

# Flags that cannot go together: the error names both and why.
CONFLICTING_FLAGS = [
    # Compact keys keep fingerprints, which a snapshot could not name; Redis keeps its own keys.
    (["--memory-compact-keys", "--snapshot", "x.snap"],
     "--snapshot cannot be used with --memory-compact-keys: the store keeps fingerprints"),
    (["--memory-compact-keys", "--store", "redis://127.0.0.1:1"],
     "--memory-compact-keys is for the memory store (--store memory)"),
]

# Their variables go through the same checks; the error names the variable.
BAD_ENVIRONMENT = [
    ({"NEAR_LIMIT_RATIO": "2"}, "NEAR_LIMIT_RATIO"),
    ({"REDIS_TIMEOUT": "2h"}, "REDIS_TIMEOUT"),
]


def run(flags, env=None):
    """Runs sluiced with `flags`: (exit code, stderr); (None, stderr) if it did not exit."""
    proc = subprocess.Popen([sluiced.BINARY, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0",
                             *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        _, err = proc.communicate(timeout=60)
        return proc.returncode, err
    except subprocess.TimeoutExpired:  # It started: the value was taken.
        proc.kill()
        _, err = proc.communicate()
        return None, err


class FlagsTest(unittest.TestCase):
    def test_values_out_of_range_are_refused_naming_the_flag(self):
        for flags, says in BAD_FLAGS:
            with self.subTest(flags=flags):
                code, err = run(flags)
                self.assertEqual(code, 2, err)
                self.assertIn(says, err)
                self.assertIn("accepted: ", err)

    def test_flags_that_cannot_go_together_are_refused_naming_both(self):
        for flags, says in CONFLICTING_FLAGS:
            with self.subTest(flags=flags):
                code, err = run(flags)
                self.assertEqual(code, 2, err)
                self.assertIn(says, err)

    def test_environment_values_out_of_range_are_refused_naming_the_variable(self):
        for extra, says in BAD_ENVIRONMENT:
            with self.subTest(env=extra):
                env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME")}
                env.update(extra)
                code, err = run([], env)
                self.assertEqual(code, 2, err)
                self.assertIn(says, err)
                self.assertIn("accepted: ", err)

    def test_values_at_the_edges_start(self):
        workdir = tempfile.mkdtemp(prefix="sluice-flags-test.")
        server = sluiced.Sluiced(
            workdir, "--max-keys", "0", "--watch-interval", "100ms", "--drain", "0s",
            "--snapshot", os.path.join(workdir, "s.snap"), "--snapshot-interval", "1d",
            "--near-limit-ratio", "1", "--redis-timeout", "1m")
        self.assertEqual(server.check("edge", domain="none")[0], 200)
        self.assertEqual(server.stop(signal.SIGTERM), 0)


if __name__ == "__main__":
    sluiced.main()
