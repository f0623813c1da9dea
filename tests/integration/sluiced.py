"""A sluiced process for the integration tests: started on a free loopback port (it picks one
with --http 127.0.0.1:0 and logs it), asked over HTTP, stopped with a signal. Standard library
only; set BINARY before use."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time

BINARY = None


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sluiced:
    """One sluiced process on a free port, with the given snapshot flags."""

    started = 0

    def __init__(self, workdir, *flags):
        """Starts sluiced with workdir/rules.yaml (when there is one) and `flags`."""
        Sluiced.started += 1
        self.log = open(os.path.join(workdir, f"sluiced{Sluiced.started}.log"), "w+")
        rules = os.path.join(workdir, "rules.yaml")
        config = ["--config", rules] if os.path.exists(rules) else []
        self.proc = subprocess.Popen(
            [BINARY, "--http", "127.0.0.1:0", "--grpc", "127.0.0.1:0", "--threads", "1", *config,
             *flags],
            stdout=self.log, stderr=self.log)
        self.port = self._await_port()

    def _await_port(self):
        # 30 s: sluiced starts in tens of milliseconds, but a 2-core CI machine running other
        # tests beside this one has been seen to take over 10 s to let it.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            self.log.seek(0)
            found = re.findall(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if found:
                return int(found[-1])
            if self.proc.poll() is not None:
                raise AssertionError(f"sluiced exited with {self.proc.returncode}")
            time.sleep(0.02)
        raise AssertionError("sluiced did not start")

    def check(self, user, domain="snap"):
        """POST /v1/check for descriptor user=`user`: (status, answer)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
        body = json.dumps({"domain": domain,
                           "descriptors": [{"entries": [{"key": "user", "value": user}]}]})
        conn.request("POST", "/v1/check", body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        conn.close()
        return response.status, answer

    def stop(self, sig=signal.SIGTERM):
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=10)
        self.log.close()
        return code

    def output(self):
        with open(self.log.name) as f:
            return f.read()
