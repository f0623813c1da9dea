#!/usr/bin/env python3
"""The command lines of sluice and sluiced as their users meet them: --version on both (and the
build in /metrics), a misspelt subcommand answered with the right one, a subcommand's error
pointing to its own --help, --server as typed, host names in --http, `sluiced --check-config`
(exit 0 with a summary, or 2 with every broken file's error, binding nothing), requests to
a domain no rule knows counted and logged, and `sluice check`/`acquire` warning of descriptors
no rule matched. Python 3 standard library only.

    python3 tests/integration/cli_test.py --sluiced build/bin/sluiced --sluice build/bin/sluice
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import unittest

import sluiced

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

GOOD_RULES = """domain: shop
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    value: /login
    rate_limit: {unit: minute, requests_per_unit: 3}
"""

# Two files broken in two ways, one good: both errors are listed, not only the first.
BROKEN_FILES = {
    "a_bad_unit.yaml": "domain: one\ndescriptors:\n  - key: user\n"
                       "    rate_limit: {unit: fortnight, requests_per_unit: 5}\n",
    "b_good.yaml": GOOD_RULES,
    "c_no_limit.yaml": "domain: three\ndescriptors:\n  - key: ip\n"
                       "    rate_limit: {unit: second, requests_per_unit: -4}\n",
}


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(sluice VERSION (\S+)", f.read()).group(1)


def run(*command, timeout=60):
    return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


class VersionTest(unittest.TestCase):
    def test_both_programs_print_the_project_version(self):
        for binary, name in ((sluiced.SLUICE, "sluice"), (sluiced.BINARY, "sluiced")):
            with self.subTest(name=name):
                result = run(binary, "--version")
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertRegex(result.stdout,
                                 r"^%s %s( \(git \S+\))?\n$" % (name,
                                                                re.escape(project_version())))

    def test_metrics_carry_the_build_info(self):
        server = sluiced.Sluiced.with_rules(GOOD_RULES).start()
        try:
            text = server.metrics()
            self.assertRegex(text, r'(?m)^sluice_build_info\{version="%s",revision="[^"]*"\} 1$'
                             % re.escape(project_version()))
            self.assertIn("# TYPE sluice_build_info gauge", text)
        finally:
            server.cleanup()


class SluiceErrorsTest(unittest.TestCase):
    def test_a_misspelt_subcommand_is_named_and_corrected(self):
        result = run(sluiced.SLUICE, "chek", "--domain", "d")
        self.assertEqual(result.returncode, 2)
        self.assertIn("'chek' is not a subcommand", result.stderr)
        self.assertIn("did you mean 'check'?", result.stderr)
        self.assertIn("simulate, check, acquire, release", result.stderr)
        self.assertNotIn("A subcommand is required", result.stderr)

    def test_no_subcommand_lists_them(self):
        result = run(sluiced.SLUICE)
        self.assertEqual(result.returncode, 2)
        self.assertIn("give a subcommand (subcommands: simulate, check, acquire, release",
                      result.stderr)
        result = run(sluiced.SLUICE, "--domain", "d", "check")
        self.assertEqual(result.returncode, 2)
        self.assertIn("'--domain' is not a flag of sluice itself", result.stderr)

    def test_a_subcommand_error_points_to_its_own_help(self):
        for args, says in ((["check", "--bogus"], "--bogus"),
                           (["simulate", "--period", "1s"], "--limit is required"),
                           (["release"], "lease is required"),
                           (["acquire", "--cost", "x"], "--cost")):
            with self.subTest(args=args):
                result = run(sluiced.SLUICE, *args)
                self.assertEqual(result.returncode, 2)
                self.assertIn("sluice %s: " % args[0], result.stderr)
                self.assertIn(says, result.stderr)
                self.assertIn("run 'sluice %s --help'" % args[0], result.stderr)
                self.assertNotIn("'sluice --help'", result.stderr)

    def test_server_errors_echo_what_was_typed(self):
        for server in ("ftp://127.0.0.1:8080", "http://127.0.0.1:port", "http://:8080"):
            with self.subTest(server=server):
                result = run(sluiced.SLUICE, "check", "--server", server, "--domain", "d",
                             "--descriptor", "k=v")
                self.assertEqual(result.returncode, 2)
                self.assertIn("--server '%s'" % server, result.stderr)
                self.assertNotIn("/v1/check", result.stderr)

    def test_server_without_a_scheme_is_taken_as_http(self):
        server = sluiced.Sluiced.with_rules(GOOD_RULES).start()
        try:
            result = run(sluiced.SLUICE, "check", "--server", "127.0.0.1:%d" % server.port, "--domain",
                         "shop", "--descriptor", "user=ann")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn('"allowed":true', result.stdout.replace(" ", ""))
        finally:
            server.cleanup()


class ListenAddressTest(unittest.TestCase):
    def test_a_host_name_is_resolved(self):
        server = sluiced.Sluiced.with_rules(GOOD_RULES)
        server._command = lambda port: [sluiced.BINARY, "--http", "localhost:%d" % port,
                                         "--grpc", "localhost:0", "--threads", "1", "--config",
                                         server.config]
        try:
            server.start()  # It answers /healthz on 127.0.0.1.
            self.assertIn("--http 'localhost:%d': localhost is 127.0.0.1" % server.port,
                          server.output())
        finally:
            server.cleanup()

    def test_a_host_that_does_not_resolve_is_refused_naming_the_flag(self):
        result = run(sluiced.BINARY, "--http", "no-such-host.invalid:8080", "--grpc",
                     "127.0.0.1:0", timeout=120)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--http 'no-such-host.invalid:8080': cannot resolve 'no-such-host.invalid'",
                      result.stderr)


class CheckConfigTest(unittest.TestCase):
    def setUp(self):
        self.workdir = tempfile.mkdtemp(prefix="sluiced-check-")
        # Held through each test: a sluiced that bound it would fail to.
        self.held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.held.bind(("127.0.0.1", 0))
        self.held.listen()
        self.port = self.held.getsockname()[1]

    def tearDown(self):
        self.held.close()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def check(self, path, *flags):
        return run(sluiced.BINARY, "--check-config", path, "--http", "127.0.0.1:%d" % self.port,
                   "--grpc", "127.0.0.1:%d" % self.port, *flags)

    def write(self, name, text):
        path = os.path.join(self.workdir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_a_good_file_passes_with_a_summary_binding_nothing(self):
        path = self.write("rules.yaml", GOOD_RULES)
        # No Redis at this address: none is opened.
        for store in ("memory", "redis://127.0.0.1:1"):
            with self.subTest(store=store):
                result = self.check(path, "--store", store)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("the rules are valid: 1 file(s), 1 domain(s), 2 rule limit(s)",
                              result.stdout)
                self.assertIn("domain 'shop'", result.stdout)
                self.assertNotIn("listening", result.stderr)

    def test_every_broken_file_is_listed(self):
        rules = os.path.join(self.workdir, "rules")
        os.mkdir(rules)
        for name, text in BROKEN_FILES.items():
            with open(os.path.join(rules, name), "w") as f:
                f.write(text)
        result = self.check(rules)
        self.assertEqual(result.returncode, 2, result.stdout)
        self.assertIn("a_bad_unit.yaml:4:", result.stderr)
        self.assertIn("c_no_limit.yaml:4:", result.stderr)
        self.assertNotIn("b_good.yaml", result.stderr)
        self.assertIn("2 error(s) in 3 file(s)", result.stderr)

    def test_files_that_clash_fail(self):
        rules = os.path.join(self.workdir, "rules")
        os.mkdir(rules)
        for name, text in (("one.yaml", GOOD_RULES),
                           ("two.yaml", GOOD_RULES.replace("key: user", "key: team")
                                                 .replace("key: path", "key: route"))):
            with open(os.path.join(rules, name), "w") as f:
                f.write(text)
        result = self.check(rules)
        self.assertEqual(result.returncode, 2)
        self.assertIn("domain 'shop' is already defined", result.stderr)
        merged = self.check(rules, "--merge-domains")
        self.assertEqual(merged.returncode, 0, merged.stderr)
        self.assertIn("2 file(s), 1 domain(s), 4 rule limit(s)", merged.stdout)

    def test_a_missing_file_fails(self):
        result = self.check(os.path.join(self.workdir, "nothing.yaml"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("nothing.yaml: cannot be read", result.stderr)


class UnknownDomainTest(unittest.TestCase):
    def test_requests_to_an_unknown_domain_are_counted_and_logged(self):
        server = sluiced.Sluiced.with_rules(GOOD_RULES, "--log-level", "debug").start()
        try:
            series = "sluice_unknown_domain_total"
            self.assertEqual(server.metric(series), 0)
            known = server.request("POST", "/v1/check", {
                "domain": "shop", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]})
            self.assertEqual(known.status, 200, known)
            self.assertEqual(server.metric(series), 0)
            unknown = server.request("POST", "/v1/check", {
                "domain": "shoq\n", "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]})
            self.assertEqual(unknown.status, 200, unknown)  # Admitted, as envoyproxy/ratelimit.
            envoy = server.request("POST", "/json", {
                "domain": "x" * 500, "descriptors": [{"entries": [{"key": "user", "value": "a"}]}]})
            self.assertEqual(envoy.status, 200, envoy)
            self.assertEqual(server.metric(series), 2)
            self.assertNotIn("shoq", server.metrics())  # No series per domain.
            log = server.output()
            self.assertIn("domain 'shoq?' has no rules", log)
            self.assertIn("domain '%s'... has no rules" % ("x" * 64), log)
        finally:
            server.cleanup()


class UnmatchedTest(unittest.TestCase):
    """`sluice check` and `sluice acquire` say on stderr when no rule matched: the descriptors
    are limited by nothing (a misspelt key, say), as the Python and Node clients warn."""

    def test_check_and_acquire_warn_when_no_rule_matched_and_only_then(self):
        server = sluiced.Sluiced.with_rules(GOOD_RULES).start()
        try:
            address = "127.0.0.1:%d" % server.port
            warning = "no rule matched these descriptors"
            for command in ("check", "acquire"):
                with self.subTest(command=command):
                    misspelt = run(sluiced.SLUICE, command, "--server", address, "--domain",
                                   "shop", "--descriptor", "usr=a")
                    self.assertEqual(misspelt.returncode, 0, misspelt.stderr)
                    self.assertIn("sluice %s: warning: %s" % (command, warning),
                                  misspelt.stderr)
                    limited = run(sluiced.SLUICE, command, "--server", address, "--domain",
                                  "shop", "--descriptor", "user=" + command)
                    self.assertEqual(limited.returncode, 0, limited.stderr)
                    self.assertNotIn(warning, limited.stderr)
        finally:
            server.cleanup()


class CalendarCheckTest(unittest.TestCase):

    def test_check_asks_for_a_calendar_quota_ad_hoc(self):
        server = sluiced.Sluiced.with_rules(GOOD_RULES).start()
        try:
            args = [sluiced.SLUICE, "check", "--server", "127.0.0.1:%d" % server.port, "--key",
                    "acme", "--limit", "1", "--period", "1mo", "--calendar", "--time-zone",
                    "Europe/Berlin"]
            first = run(*args)
            self.assertEqual(first.returncode, 0, first.stderr)
            second = run(*args)
            self.assertEqual(second.returncode, 1, second.stdout + second.stderr)
            # Without --calendar, 1mo is no duration: refused, naming it.
            fixed = run(*args[:-3])
            self.assertEqual(fixed.returncode, 2, fixed.stdout + fixed.stderr)
            self.assertIn("1mo", fixed.stdout + fixed.stderr)
            zone = run(*args[:-1], "Europe/Berln")
            self.assertNotIn(zone.returncode, (0, 1), zone.stdout + zone.stderr)
            self.assertIn("unknown time zone 'Europe/Berln'", zone.stdout + zone.stderr)
        finally:
            server.cleanup()


if __name__ == "__main__":
    sluiced.main(sluice=True)
