"""flag_wire_test.py's world: the sluiced of a scene (Scene), and what the scenes need, made
once (World): rules, certificates made by the openssl command, redis-servers (one over TLS), a
memcached, a fake sentinel, statsd sockets. Python 3 standard library only."""

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import sluiced
from memcached_test import Memcached
from redis_test import Redis

PLAIN_RULES = """domain: wire
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 4}
    metadata: {team: blue}
  - key: near
    rate_limit: {unit: day, requests_per_unit: 4}
"""
# Leases and shares besides, for the stores that keep them.
RULES = PLAIN_RULES + """  - key: job
    concurrency: 100
    lease_ttl: 1h
  - key: hot
    rate_limit: {unit: day, requests_per_unit: 1000, share: {max: 10, ttl: 1m}}
"""
# A second file of the same domain: loads only when domains merge.
MORE_RULES = """domain: wire
descriptors:
  - key: extra
    rate_limit: {unit: day, requests_per_unit: 5}
"""

# A domain whose one rule denies everything, in a folder of the rules directory: read from a
# folder, and not from one named with a dot when dotfiles are skipped.
DENY_ALL = """domain: {}
descriptors:
  - key: k
    rate_limit: {{unit: day, requests_per_unit: 0}}
"""

# Of the test's own environment, what sluiced may need (sanitizer options); nothing else, so
# that a scene's variables are the only ones set.
KEPT = ("PATH", "ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS")
PASSWORD = "wire-secret"
HEADERS = ("X-Wire-Limit", "X-Wire-Remaining", "X-Wire-Reset")


def eventually(probe, what, seconds=60):
    """Calls probe() until it returns a true value (returned); fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        last = probe()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not so after {seconds} s (last: {last!r})")
        time.sleep(0.05)


def log(s):
    with open(os.path.join(s.workdir, "stderr"), errors="replace") as f:
        return f.read()


class Scene(sluiced.Sluiced):
    """One sluiced of a scene: build(scene, http_port) gives its command line's arguments and
    its variables, for ports picked at each try (gRPC's and the debug listener's too)."""

    def __init__(self, workdir, build, world):
        super().__init__(workdir, start=False)
        self.build = build
        self.world = world
        self.grpc_port = self.debug_port = None
        self.grpc_host = self.debug_host = "127.0.0.1"  # Where the checks look for them.

    def _command(self, port):
        self.grpc_port, self.debug_port = sluiced.free_port(), sluiced.free_port()
        args, variables = self.build(self, port)
        self.env = {name: os.environ[name] for name in KEPT if name in os.environ}
        self.env.update(variables)
        return [sluiced.BINARY, *args]

    def start(self, timeout=120.0, any_status=False):
        """As Sluiced.start, then waits for gRPC's listener too: sluiced answers /healthz on
        HTTP before its gRPC server has bound (a moment later, longer under the sanitizers),
        and a row asking gRPC first would find its port closed."""
        super().start(timeout=timeout, any_status=any_status)
        deadline = time.monotonic() + 120
        while self.proc.poll() is None and not sluiced.listens(self.proc.pid, self.grpc_port,
                                                                   any_address=True):
            if time.monotonic() > deadline:  # sluice-timing: watchdog
                break  # The rows that ask gRPC fail, saying what they found.
            time.sleep(0.02)
        return self

    def listeners(self, port, threads=1):
        """The command line's listeners: HTTP on `port`, gRPC on a port of its own."""
        return ["--http", f"127.0.0.1:{port}", "--grpc", f"127.0.0.1:{self.grpc_port}",
                "--threads", str(threads)]


class World:
    """What the scenes need, made once, when first asked for: rules, certificates, servers."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sluice-wire-test.")
        self.cleanups = []
        self._made = {}
        self.rules = self.write("rules/a.yaml", RULES)
        self.plain_rules = self.write("plain/a.yaml", PLAIN_RULES)
        self.both = os.path.dirname(self.write("both/a.yaml", RULES))
        self.write("both/b.yaml", MORE_RULES)
        self.write("both/folder/c.yaml", DENY_ALL.format("in_folder"))
        self.write("both/.hidden/d.yaml", DENY_ALL.format("hidden"))
        self.datagrams = {}

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def once(self, name, make):
        if name not in self._made:
            self._made[name] = make()
        return self._made[name]

    def close(self):
        for cleanup in reversed(self.cleanups):
            cleanup()
        shutil.rmtree(self.dir, ignore_errors=True)

    def redis(self, name):
        """A redis-server of its own for `name`, with a password."""
        def make():
            workdir = os.path.join(self.dir, name)
            os.makedirs(workdir)
            redis = Redis(workdir)
            self.cleanups.append(lambda: redis.proc.poll() is None and redis.stop())
            redis_cli(redis.port, "CONFIG", "SET", "requirepass", PASSWORD, password=None)
            return redis
        return self.once("redis-" + name, make)

    def statsd(self, name):
        """A UDP socket sluiced's statistics are sent to: its port."""
        def make():
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("127.0.0.1", 0))
            sock.settimeout(60)
            self.cleanups.append(sock.close)
            self.datagrams[name] = sock
            return sock.getsockname()[1]
        return self.once("statsd-" + name, make)

    def certificates(self):
        """The openssl command's CA, server and client certificates: {name: (crt, key)}."""
        def make():
            d = os.path.join(self.dir, "tls")
            os.makedirs(d)

            def run(*command):
                subprocess.run(command, cwd=d, check=True, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
            run("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-keyout", "ca.key", "-out",
                "ca.crt", "-subj", "/CN=sluice-wire-ca", "-addext",
                "basicConstraints=critical,CA:TRUE", "-addext",
                "keyUsage=critical,keyCertSign,cRLSign")
            names = {"server": "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                               "extendedKeyUsage=serverAuth,clientAuth\n",
                     # A certificate for another host: Redis's, with --redis-tls-skip-verify.
                     "elsewhere": "subjectAltName=DNS:elsewhere.example\n"
                                  "extendedKeyUsage=serverAuth,clientAuth\n",
                     "client": "subjectAltName=DNS:client.sluice.test\n"
                               "extendedKeyUsage=clientAuth\n",
                     "intruder": "subjectAltName=DNS:intruder.sluice.test\n"
                                 "extendedKeyUsage=clientAuth\n"}
            for name, extensions in names.items():
                with open(os.path.join(d, name + ".ext"), "w") as f:
                    f.write(extensions)
                run("openssl", "req", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout", name + ".key", "-out",
                    name + ".csr", "-subj", "/CN=" + name)
                run("openssl", "x509", "-req", "-in", name + ".csr", "-CA", "ca.crt", "-CAkey",
                    "ca.key", "-CAcreateserial", "-days", "2", "-extfile", name + ".ext",
                    "-out", name + ".crt")
            return {name: (os.path.join(d, name + ".crt"), os.path.join(d, name + ".key"))
                    for name in ("ca", *names)}
        return self.once("certificates", make)

    def xds(self, name):
        """An xDS management server (xds_server.py) over mutual TLS, showing the certificate
        of elsewhere.example and asking for one of the CA's; v1 pushed: domain xdswire, user 2
        per hour."""
        def make():
            import xds_server
            certs = self.certificates()

            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            server = xds_server.ManagementServer(tls=(
                read(certs["elsewhere"][0]), read(certs["elsewhere"][1]), read(certs["ca"][0])))
            self.cleanups.append(server.stop)
            server.push("v1", [xds_server.config("rules", "xdswire", [
                {"key": "user", "rate_limit": {"unit": "hour", "requests_per_unit": 2}}])])
            return server
        return self.once("xds-" + name, make)

    def tls_redis(self):
        """A redis-server over TLS only, showing the certificate of elsewhere.example and
        asking clients for one: its port."""
        def make():
            certs = self.certificates()
            workdir = os.path.join(self.dir, "redis-tls")
            os.makedirs(workdir)
            for _ in range(5):
                port = sluiced.free_port()
                proc = subprocess.Popen(
                    ["redis-server", "--port", "0", "--tls-port", str(port), "--bind",
                     "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", workdir,
                     "--logfile", os.path.join(workdir, "redis.log"),
                     "--tls-cert-file", certs["elsewhere"][0],
                     "--tls-key-file", certs["elsewhere"][1],
                     "--tls-ca-cert-file", certs["ca"][0], "--tls-auth-clients", "yes"])
                deadline = time.monotonic() + 60
                while proc.poll() is None and time.monotonic() < deadline:
                    if sluiced.listens(proc.pid, port):
                        self.cleanups.append(lambda: (proc.kill(), proc.wait()))
                        return port
                    time.sleep(0.02)
                proc.kill()
                proc.wait()
            raise AssertionError("redis-server over TLS did not start")
        return self.once("tls-redis", make)

    def memcached(self):
        def make():
            memcached = Memcached()
            self.cleanups.append(memcached.kill)
            return memcached
        return self.once("memcached", make)

    def fake_sentinel(self):
        """A TCP port whose server answers every command with an error and keeps the bytes
        it receives (self.sentinel_heard)."""
        def make():
            server = socket.socket()
            server.bind(("127.0.0.1", 0))
            server.listen()
            self.sentinel_heard = b""
            lock = threading.Lock()

            def serve(conn):
                with conn:
                    while True:
                        try:
                            data = conn.recv(65536)
                        except OSError:
                            return
                        if not data:
                            return
                        with lock:
                            self.sentinel_heard += data
                        conn.sendall(b"-ERR not a sentinel\r\n")

            def accept():
                while True:
                    try:
                        conn, _ = server.accept()
                    except OSError:
                        return
                    threading.Thread(target=serve, args=(conn,), daemon=True).start()
            threading.Thread(target=accept, daemon=True).start()
            self.cleanups.append(server.close)
            return server.getsockname()[1]
        return self.once("sentinel", make)


def redis_cli(port, *command, password=PASSWORD):
    auth = ["-a", password, "--no-auth-warning"] if password else []
    return subprocess.run(["redis-cli", "-p", str(port), *auth, *command], check=True,
                          capture_output=True, text=True, timeout=60).stdout


def redis_keys(port):
    return [key for key in redis_cli(port, "--scan").split("\n") if key]


def redis_connections(port):
    """Clients connected to the redis-server on `port`, the asking redis-cli aside."""
    return len(redis_cli(port, "CLIENT", "LIST").splitlines()) - 1

