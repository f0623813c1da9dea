#!/usr/bin/python3
"""Rules from an xDS management server (--xds; their CONFIG_TYPE=GRPC_XDS_SOTW), against the
test's own management server (xds_server.py, which the reference's client also accepts:
bench/peers/xds_check.py): nothing served before the first set, then its rules; each set taken
with an ACK, the keys' counts kept across sets; a bad set refused with a NACK naming the fault
while the rules in force stay; a stream that ends opened again after the backoff, with the
version held, and a set pushed meanwhile taken; --xds-force-start serving at once (an error
until a set comes); SIGTERM while waiting for the first set.

Debian's python3-grpcio and python3-protobuf (hence /usr/bin/python3), with the messages the
build generates (target sluice_python_proto):

    PYTHONPATH=build/python_proto /usr/bin/python3 tests/integration/xds_test.py \\
        --sluiced build/bin/sluiced
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import rls_client
import sluiced
import xds_server
from http_fixture import main


def rules(limit, domain="xds", name="rules"):
    return xds_server.config(name, domain, [
        {"key": "user", "rate_limit": {"unit": "hour", "requests_per_unit": limit}},
        {"key": "path", "value": "/login", "shadow_mode": True,
         "rate_limit": {"unit": "day", "requests_per_unit": 1}}])


class XdsTest(unittest.TestCase):
    def setUp(self):
        self.server = xds_server.ManagementServer()
        self.addCleanup(self.server.stop)
        self.workdir = tempfile.mkdtemp(prefix="sluiced-xds-")
        self.addCleanup(shutil.rmtree, self.workdir, True)
        self.sluiced = None

    def tearDown(self):
        if self.sluiced is not None and self.sluiced.proc.poll() is None:
            self.sluiced.stop()

    def start(self, *flags):
        """sluiced on the management server; returns once it listens (so, without
        --xds-force-start, once a set is in force)."""
        self.sluiced = sluiced.Sluiced(
            self.workdir, "--xds", "127.0.0.1:%d" % self.server.port, "--xds-backoff-initial",
            "100ms", "--xds-backoff-max", "200ms", *flags)
        return self.sluiced

    def grpc_port(self):
        """The gRPC port sluiced said (the line after the HTTP one Sluiced() waits for)."""
        deadline = time.monotonic() + 120
        while not (found := re.findall(r"grpc://127\.0\.0\.1:(\d+)", self.sluiced.output())):
            # sluice-timing: watchdog
            self.assertLess(time.monotonic(), deadline, "no gRPC listener said")
            time.sleep(0.02)
        return int(found[-1])

    def ask(self, user="alice", domain="xds"):
        """(overall code, limit remaining) of one ShouldRateLimit."""
        answer = rls_client.should_rate_limit(self.grpc_port(), domain, [[("user", user)]])
        return answer["overall_code"], answer["statuses"][0]["limit_remaining"]

    def test_nothing_is_served_before_the_first_set_then_its_rules(self):
        started = []
        starter = threading.Thread(target=lambda: started.append(self.start()))
        starter.start()
        subscribe = self.server.wait_for(lambda r: r[:1], what="the subscription")[0]
        self.assertEqual(subscribe.type_url, xds_server.TYPE_URL)
        self.assertEqual(subscribe.node.id, "default")
        self.assertEqual((subscribe.version_info, subscribe.response_nonce), ("", ""))
        self.server.push("v1", [rules(3)])
        starter.join(180)
        self.assertEqual(len(started), 1, "sluiced never listened")
        ack = self.server.wait_for(lambda r: self.server.acks("v1"), what="the ACK")[0]
        self.assertEqual(ack.response_nonce, "1")
        self.assertEqual(self.ask(), ("OK", 2))
        # The listener opened only once the set was in force.
        log = self.sluiced.output()
        self.assertLess(log.index("xDS: version 'v1' in force (ACK)"), log.index("listening on"))

    def test_a_bad_set_is_nacked_and_the_rules_in_force_keep_their_counts(self):
        self.server.push("v1", [rules(3)])
        self.start()
        self.assertEqual(self.ask(), ("OK", 2))
        # One domain in two resources (no --merge-domains): refused, as a file pair would be.
        self.server.push("v2", [rules(9), rules(9, name="again")])
        nack = self.server.wait_for(lambda r: self.server.nacks(), what="the NACK")[0]
        self.assertEqual((nack.version_info, nack.response_nonce), ("v1", "2"))
        self.assertEqual(nack.error_detail.code, 3)  # INVALID_ARGUMENT
        self.assertIn("again:1:1: domain 'xds' is already defined", nack.error_detail.message)
        self.assertEqual(self.ask(), ("OK", 1))  # v1's limit, its count.
        self.assertIn("xDS: version 'v2' refused (NACK)", self.sluiced.output())
        # A set of another kind of resource: refused naming its type.
        wrong = xds_server.any_pb2.Any(type_url="type.googleapis.com/other.Thing", value=b"")
        self.server.push("v3", [wrong])
        self.server.wait_for(lambda r: len(self.server.nacks()) == 2, what="the second NACK")
        self.assertIn("type.googleapis.com/other.Thing", self.server.nacks()[1].error_detail.message)
        # v4 raises the limit: the key's count carries over.
        self.server.push("v4", [rules(5)])
        self.server.wait_for(lambda r: self.server.acks("v4"), what="the ACK of v4")
        self.assertEqual(self.ask(), ("OK", 2))
        self.assertEqual(self.ask(), ("OK", 1))
        self.assertEqual(self.ask(), ("OK", 0))
        self.assertEqual(self.ask()[0], "OVER_LIMIT")

    def test_a_stream_that_ends_is_opened_again_and_takes_what_was_pushed_meanwhile(self):
        self.server.push("v1", [rules(3)])
        self.start()
        self.assertEqual(self.ask(), ("OK", 2))
        streams = len(self.server.stream_metadata)
        self.server.drop_streams()
        self.server.push("v2", [rules(4)])  # No stream to send it on.
        self.server.wait_for(
            lambda r: len(self.server.stream_metadata) > streams and self.server.acks("v2"),
            what="the new stream's ACK of v2")
        reopened = [r for r in self.server.requests if r.version_info == "v1"
                    and r.response_nonce == ""]
        self.assertTrue(reopened, "the new stream did not say the version it held")
        self.assertEqual(self.ask(), ("OK", 2))  # v2's 4, one spent before.
        self.assertIn("xDS: opening the stream to", self.sluiced.output())

    def test_force_start_serves_before_any_set(self):
        self.start("--xds-force-start")  # Returns once it listens: no set was pushed.
        # No rules yet: an error, as theirs answers one ("no rate limit configuration loaded").
        with self.assertRaises(rls_client.GrpcError) as refused:
            rls_client.should_rate_limit(self.grpc_port(), "xds", [[("user", "a")]])
        self.assertIn("no rules are loaded", refused.exception.details)
        self.server.push("v1", [rules(3)])
        self.server.wait_for(lambda r: self.server.acks("v1"), what="the ACK")
        self.assertEqual(self.ask(), ("OK", 2))
        log = self.sluiced.output()
        self.assertLess(log.index("listening on"), log.index("xDS: version 'v1' in force"))

    def test_a_response_of_another_type_is_refused_not_read_as_no_rules(self):
        self.server.push("v1", [rules(3)])
        self.start()
        self.server.push("v2", [], type_url="type.googleapis.com/envoy.config.cluster.v3.Cluster")
        nack = self.server.wait_for(lambda r: self.server.nacks(), what="the NACK")[0]
        self.assertEqual(nack.version_info, "v1")
        self.assertIn("envoy.config.cluster.v3.Cluster", nack.error_detail.message)
        self.assertEqual(self.ask(), ("OK", 2))  # v1's rules still in force.

    def test_sighup_while_waiting_for_the_first_set_changes_nothing(self):
        path = os.path.join(self.workdir, "sighup.log")
        with open(path, "w") as log:
            proc = subprocess.Popen(
                [sluiced.BINARY, "--xds", "127.0.0.1:%d" % self.server.port, "--http",
                 "127.0.0.1:0", "--grpc", "127.0.0.1:0"], stdout=log, stderr=log)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))

        def said(text):
            deadline = time.monotonic() + 120
            while True:
                with open(path) as f:
                    if text in f.read():
                        return
                # sluice-timing: watchdog
                self.assertLess(time.monotonic(), deadline, "sluiced never said " + text)
                time.sleep(0.02)
        self.server.wait_for(lambda r: r[:1], what="the subscription")
        proc.send_signal(signal.SIGHUP)
        said("nothing to reload")
        self.assertIsNone(proc.poll())  # Still waiting, not stopped.
        self.server.push("v1", [rules(3)])
        said("listening on")
        proc.terminate()
        self.assertEqual(proc.wait(60), 0)

    def test_sigterm_while_waiting_for_the_first_set_stops_at_once(self):
        self.sluiced = sluiced.Sluiced(self.workdir, "--xds", "127.0.0.1:%d" % self.server.port,
                                       start=False)
        self.sluiced.proc = subprocess.Popen(self.sluiced._command(0), stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL)
        self.server.wait_for(lambda r: r[:1], what="the subscription")
        self.assertEqual(self.sluiced.stop(), 0)


if __name__ == "__main__":
    main(__doc__)
