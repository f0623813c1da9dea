#!/usr/bin/env python3
"""`sluice feedback` (issue 36) against a sluiced: a curl -D dump (a redirect, then a 429 with
Retry-After and a cookie) read from a file and from standard input, --header and --status,
an ad hoc limit with --feedback, and the exit statuses (0 told, 2 for nothing to tell, a bad
header, an unreadable file, a refusal). Python 3 standard library only.

    python3 tests/integration/cli_feedback_test.py --sluiced build/bin/sluiced --sluice build/bin/sluice
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import sluiced

RULES = """domain: jobs
descriptors:
  - key: partner
    rate_limit: {unit: minute, requests_per_unit: 50, feedback: {max_pause: 2m}}
"""
DUMP = ("HTTP/1.1 301 Moved Permanently\r\nLocation: /v2/orders\r\nRetry-After: 99\r\n\r\n"
        "HTTP/2 429\r\nretry-after: 7\r\nset-cookie: session=secret\r\n"
        "x-ratelimit-remaining: 0\r\n\r\n")

SERVER = None
FILES = None


def setUpModule():
    global SERVER, FILES
    FILES = tempfile.mkdtemp(prefix="sluice-cli-feedback-")
    SERVER = sluiced.Sluiced.with_rules(RULES).start()


def tearDownModule():
    if SERVER is not None:
        SERVER.cleanup()
    shutil.rmtree(FILES, ignore_errors=True)


def sluice(*args, stdin=None):
    command, rest = args[0], args[1:]
    return subprocess.run([sluiced.SLUICE, command, "--server", "127.0.0.1:%d" % SERVER.port,
                           *rest], capture_output=True, text=True, timeout=60,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


def partner(name):
    return ["--domain", "jobs", "--descriptor", "partner=" + name]


class FeedbackTest(unittest.TestCase):
    def test_a_curl_dump_pauses_the_key_with_its_last_answer(self):
        dump = os.path.join(FILES, "headers.txt")
        with open(dump, "w") as f:
            f.write(DUMP)
        told = sluice("feedback", *partner("file"), "--headers-file", dump)
        self.assertEqual(told.returncode, 0, told.stderr)
        answer = json.loads(told.stdout)
        # The 429's Retry-After (7 s), not the redirect's (99 s).
        self.assertEqual(answer["limits"][0]["pause_us"], 7_000_000)
        self.assertTrue(answer["limits"][0]["paused"])
        self.assertNotIn("secret", told.stdout)
        checked = sluice("check", *partner("file"))
        self.assertEqual(checked.returncode, 1, checked.stdout)
        self.assertTrue(json.loads(checked.stdout)["limits"][0]["paused"])

    def test_standard_input_and_header_flags(self):
        told = sluice("feedback", *partner("stdin"), "--headers-file", "-", stdin=DUMP)
        self.assertEqual(told.returncode, 0, told.stderr)
        self.assertEqual(json.loads(told.stdout)["limits"][0]["pause_us"], 7_000_000)
        told = sluice("feedback", *partner("flags"), "--status", "200",
                      "--header", "RateLimit: \"p\";r=3;t=20")
        self.assertEqual(told.returncode, 0, told.stderr)
        self.assertEqual(json.loads(told.stdout)["limits"][0]["remaining"], 3)

    def test_an_ad_hoc_limit_with_feedback(self):
        ask = ["--key", "cli-partner", "--limit", "5", "--period", "1m", "--feedback"]
        told = sluice("feedback", *ask, "--status", "429", "--header", "Retry-After: 4")
        self.assertEqual(told.returncode, 0, told.stderr)
        self.assertEqual(sluice("check", *ask).returncode, 1)
        refused = sluice("feedback", "--key", "cli-partner", "--limit", "5", "--period", "1m",
                         "--status", "429")
        self.assertEqual(refused.returncode, 2)
        self.assertIn("takes no feedback", refused.stderr)

    def test_errors(self):
        nothing = sluice("feedback", *partner("none"))
        self.assertEqual(nothing.returncode, 2)
        self.assertIn("nothing to tell", nothing.stderr)
        bad = sluice("feedback", *partner("none"), "--header", "no colon here")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("not 'Name: value'", bad.stderr)
        missing = sluice("feedback", *partner("none"), "--headers-file",
                         os.path.join(FILES, "absent"))
        self.assertEqual(missing.returncode, 2)
        self.assertIn("cannot read", missing.stderr)


if __name__ == "__main__":
    sluiced.main(verbosity=2, sluice=True)
