#!/usr/bin/env python3
"""`sluice check --receipt`, `sluice settle`, `sluice reset` (issue 33), `sluice explain` and
`sluice top` (issue 35) against a sluiced with a receipt secret and an admin token, one without the token,
and one that hides keys (--hide-keys): the receipt printed
alone, a settle's answer and exit statuses (0 settled, 1 refused with the server's reason on
stderr, 2 for a bad flag or no server), a reset refused without the right token and done with
it, ad hoc and in rules mode. Python 3 standard library only.

    python3 tests/integration/cli_settle_test.py --sluiced build/bin/sluiced --sluice build/bin/sluice
"""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

import sluiced

RULES = """domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5, algorithm: sliding_log}
"""
ADMIN_TOKEN = "cli-admin-token-0123456789"

SERVER = None
NO_ADMIN = None
HIDDEN = None
FILES = None


def setUpModule():
    global SERVER, NO_ADMIN, HIDDEN, FILES
    FILES = tempfile.mkdtemp(prefix="sluice-cli-settle-")
    write("secret", "k" * 40 + "\n")
    write("token", ADMIN_TOKEN + "\n")
    write("wrong", "not-the-admin-token-0123\n")
    secret = ["--secret-file", path("secret")]
    SERVER = sluiced.Sluiced.with_rules(RULES, *secret, "--admin-token-file",
                                        path("token")).start()
    NO_ADMIN = sluiced.Sluiced.with_rules(RULES, *secret).start()
    HIDDEN = sluiced.Sluiced.with_rules(RULES, "--hide-keys").start()


def tearDownModule():
    for server in (SERVER, NO_ADMIN, HIDDEN):
        if server is not None:
            server.cleanup()
    shutil.rmtree(FILES, ignore_errors=True)


def path(name):
    return os.path.join(FILES, name)


def write(name, text):
    with open(path(name), "w") as f:
        f.write(text)


def sluice(*args, server=None):
    address = "127.0.0.1:%d" % (server or SERVER).port
    command, rest = args[0], args[1:]
    return subprocess.run([sluiced.SLUICE, command, "--server", address, *rest],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def user(name):
    return ["--domain", "shop", "--descriptor", "user=" + name]


def remaining(*request):
    result = sluice("check", "--cost", "0", *request)
    return json.loads(result.stdout)["remaining"]


class SettleTest(unittest.TestCase):
    def test_check_prints_the_receipt_alone_and_settle_gives_back(self):
        check = sluice("check", "--receipt", "--cost", "3", *user("ann"))
        self.assertEqual(check.returncode, 0, check.stderr)
        receipt = check.stdout.strip()
        self.assertEqual(check.stdout, receipt + "\n")
        self.assertTrue(receipt and "{" not in receipt and " " not in receipt, check.stdout)
        self.assertEqual(remaining(*user("ann")), 2)

        settle = sluice("settle", receipt, "--cost", "1")
        self.assertEqual(settle.returncode, 0, settle.stderr)
        answer = json.loads(settle.stdout)
        self.assertEqual((answer["settled"], answer["cost"], answer["given_back"],
                          answer["charged"]), (True, 1, 2, 0))
        self.assertEqual(answer["limits"][0]["name"], "shop.user")
        self.assertEqual(remaining(*user("ann")), 4)

        again = sluice("settle", receipt, "--cost", "0")
        self.assertEqual(again.returncode, 1)
        self.assertIn("sluice settle: refused: receipt was settled already", again.stderr)
        self.assertEqual(again.stdout, "")
        self.assertEqual(remaining(*user("ann")), 4)

    def test_forged_receipts_are_refused_with_the_servers_reason(self):
        check = sluice("check", "--receipt", *user("eve"))
        receipt = check.stdout.strip()
        i = len("r1.") + 8
        tampered = receipt[:i] + ("B" if receipt[i] == "A" else "A") + receipt[i + 1:]
        for forged, why in ((tampered, "signature"), ("r1.bm90.YQ", "not a receipt"),
                            ("not-a-receipt", "not a receipt"), ("", "empty")):
            with self.subTest(forged=forged[:20]):
                result = sluice("settle", forged, "--cost", "0")
                self.assertEqual(result.returncode, 1, result.stderr)
                self.assertIn("sluice settle: refused: receipt", result.stderr)
                self.assertIn(why, result.stderr)
        self.assertEqual(remaining(*user("eve")), 4)
        self.assertEqual(sluice("settle", receipt, "--cost", "0").returncode, 0)
        self.assertEqual(remaining(*user("eve")), 5)

    def test_ad_hoc_with_max_debt_and_a_charge_on_top(self):
        ask = ["--key", "cli-adhoc", "--algorithm", "sliding_log", "--limit", "10", "--period",
               "1h"]
        check = sluice("check", "--receipt", "--cost", "2", "--max-debt", "5", *ask)
        self.assertEqual(check.returncode, 0, check.stderr)
        settle = sluice("settle", check.stdout.strip(), "--cost", "6")
        self.assertEqual(settle.returncode, 0, settle.stderr)
        self.assertEqual(json.loads(settle.stdout)["charged"], 4)
        self.assertEqual(remaining(*ask), 4)

    def test_no_receipt_when_nothing_was_charged_and_a_denial_prints_its_answer(self):
        free = sluice("check", "--receipt", "--cost", "0", *user("bob"))
        self.assertEqual((free.returncode, free.stdout), (0, ""))
        self.assertIn("sluice check: no receipt: nothing was charged", free.stderr)
        denied = sluice("check", "--receipt", "--cost", "6", *user("bob"))
        self.assertEqual(denied.returncode, 1)
        self.assertEqual(json.loads(denied.stdout)["allowed"], False)

    def test_bad_flags_and_no_server_exit_2(self):
        for args, says in ((["settle", "r", "--cost", "-1"], "--cost must not be negative"),
                           (["settle", "r"], "--cost is required"),
                           (["settle", "--cost", "1"], "receipt is required"),
                           (["reset", *user("x")], "--admin-token-file is required"),
                           (["reset", "--admin-token-file", path("token")], "give either"),
                           (["reset", *user("x"), "--admin-token-file", path("missing")],
                            "cannot read"),
                           (["reset", *user("x"), "--cost", "1", "--admin-token-file",
                             path("token")], "--cost"),
                           (["check", "--max-debt", "1", *user("x")], "--max-debt is for ad hoc")):
            with self.subTest(args=args):
                result = sluice(*args)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertIn(says, result.stderr)
        port = sluiced.free_port()
        gone = subprocess.run([sluiced.SLUICE, "settle", "--server", "127.0.0.1:%d" % port, "r",
                               "--cost", "0"], capture_output=True, text=True, timeout=60)
        self.assertEqual(gone.returncode, 2)
        self.assertIn("sluice settle: ", gone.stderr)
        self.assertIn("cannot connect", gone.stderr)


class ResetTest(unittest.TestCase):
    def test_reset_with_the_right_token_and_refused_otherwise(self):
        self.assertEqual(sluice("check", "--cost", "5", *user("carol")).returncode, 0)
        self.assertEqual(sluice("check", *user("carol")).returncode, 1)
        wrong = sluice("reset", *user("carol"), "--admin-token-file", path("wrong"))
        self.assertEqual(wrong.returncode, 1, wrong.stderr)
        self.assertIn("sluice reset: refused (403)", wrong.stderr)
        self.assertEqual(remaining(*user("carol")), 0)
        done = sluice("reset", *user("carol"), "--admin-token-file", path("token"))
        self.assertEqual(done.returncode, 0, done.stderr)
        answer = json.loads(done.stdout)
        self.assertEqual((answer["reset"], [l["name"] for l in answer["limits"]]),
                         (True, ["shop.user"]))
        self.assertEqual(remaining(*user("carol")), 5)

    def test_reset_ad_hoc(self):
        ask = ["--key", "cli-reset", "--limit", "1", "--period", "1h"]
        sluice("check", *ask)
        self.assertEqual(sluice("check", *ask).returncode, 1)
        done = sluice("reset", *ask, "--admin-token-file", path("token"))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(sluice("check", *ask).returncode, 0)

    def test_admin_endpoints_off_without_the_flag(self):
        off = sluice("reset", *user("dan"), "--admin-token-file", path("token"), server=NO_ADMIN)
        self.assertEqual(off.returncode, 1, off.stderr)
        self.assertIn("sluice reset: refused (403): admin endpoints are off", off.stderr)


class ExplainTest(unittest.TestCase):
    def test_explain_prints_the_rule_the_key_and_the_decider(self):
        self.assertEqual(sluice("check", "--cost", "4", *user("erin")).returncode, 0)
        last = sluice("explain", *user("erin"))
        self.assertEqual(last.returncode, 0, last.stderr)
        self.assertIn("shop at cost 1: admitted", last.stdout)
        self.assertIn("descriptor 0: user=erin\n  rule shop.user\n", last.stdout)
        self.assertIn("shop.user  <- decided the answer", last.stdout)
        self.assertIn("sliding_log 5 per 1h, hard mode", last.stdout)
        self.assertIn("key shop user=erin", last.stdout)
        self.assertIn("before: 1 remaining", last.stdout)
        self.assertIn("after:  0 remaining", last.stdout)
        over = sluice("explain", *user("erin"))
        self.assertEqual(over.returncode, 1, over.stderr)
        self.assertIn("shop at cost 1: denied", over.stdout)
        self.assertIn("retry in ", over.stdout)
        unmatched = sluice("explain", "--domain", "shop", "--descriptor", "team=x")
        self.assertEqual(unmatched.returncode, 0, unmatched.stderr)
        self.assertIn('no rule: entry 0 (key "team") is no descriptor key under shop',
                      unmatched.stdout)

    def test_explain_json_is_the_servers_answer(self):
        answer = sluice("explain", "--json", *user("fay"))
        self.assertEqual(answer.returncode, 0, answer.stderr)
        explained = json.loads(answer.stdout)["explain"]
        self.assertEqual(explained["descriptors"][0]["limits"][0]["after"]["remaining"], 4)

    def test_a_look_at_cost_zero_needs_the_admin_token(self):
        sluice("check", *user("gus"))
        refused = sluice("explain", "--cost", "0", *user("gus"))
        self.assertEqual(refused.returncode, 2)
        self.assertIn("the server answered 401", refused.stderr)
        look = sluice("explain", "--cost", "0", *user("gus"), "--admin-token-file", path("token"))
        self.assertEqual(look.returncode, 0, look.stderr)
        self.assertIn("before: 4 remaining", look.stdout)
        self.assertIn("after:  4 remaining", look.stdout)
        self.assertEqual(remaining(*user("gus")), 4)
        off = sluice("explain", "--cost", "0", *user("gus"), "--admin-token-file", path("token"),
                     server=NO_ADMIN)
        self.assertEqual(off.returncode, 2)
        self.assertIn("admin endpoints are off", off.stderr)

    def test_hide_keys_shows_a_hash_and_never_the_key(self):
        first = json.loads(sluice("explain", "--json", *user("hal"), server=HIDDEN).stdout)
        again = json.loads(sluice("explain", "--json", *user("hal"), server=HIDDEN).stdout)
        key = first["explain"]["descriptors"][0]["limits"][0]["key"]
        self.assertRegex(key, r"^#[0-9a-f]{16}$")
        self.assertEqual(again["explain"]["descriptors"][0]["limits"][0]["key"], key)
        other = json.loads(sluice("explain", "--json", *user("ida"), server=HIDDEN).stdout)
        self.assertNotEqual(other["explain"]["descriptors"][0]["limits"][0]["key"], key)


class TopTest(unittest.TestCase):
    def test_top_once_names_the_flooding_key(self):
        for _ in range(8):
            sluice("check", *user("flood"))
        sluice("check", *user("quiet"))
        top = sluice("top", "--once", "--admin-token-file", path("token"))
        self.assertEqual(top.returncode, 0, top.stderr)
        self.assertIn("top offenders by denied over the last 300 s", top.stdout)
        lines = top.stdout.splitlines()
        rule = lines.index(next(l for l in lines if l.startswith("shop.user:")))
        self.assertRegex(lines[rule + 2], r"^\s+3\s+\d+\.\d%\s+shop user=flood$")
        hits = sluice("top", "--once", "--json", "--by", "hits", "--rule", "shop.user", "-n", "1",
                      "--admin-token-file", path("token"))
        answer = json.loads(hits.stdout)
        self.assertEqual(answer["rules"][0]["keys"][0]["key"], "shop user=flood")
        self.assertEqual(answer["rules"][0]["keys"][0]["count"], 8)

    def test_top_refused_without_the_right_token(self):
        wrong = sluice("top", "--once", "--admin-token-file", path("wrong"))
        self.assertEqual(wrong.returncode, 1)
        self.assertIn("sluice top: refused (403)", wrong.stderr)
        off = sluice("top", "--once", "--admin-token-file", path("token"), server=NO_ADMIN)
        self.assertEqual(off.returncode, 1)
        self.assertIn("admin endpoints are off", off.stderr)


if __name__ == "__main__":
    sluiced.main(sluice=True)
