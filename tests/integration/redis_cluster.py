"""A Redis Cluster for the integration tests: Debian's redis-server, 3 masters with a replica
each, on loopback ports picked here (each with its bus port, port + 10000, free too), made
with `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`. Standard library
only; commands go through redis-cli.

    cluster = RedisCluster(workdir)      # started, every node agreeing, replicas in sync
    cluster.url()                        # redis+cluster://127.0.0.1:p1,127.0.0.1:p2,...
    cluster.find_keys("*alice*")         # keys on every master, by SCAN
    cluster.keyslot(key)                 # CLUSTER KEYSLOT
    cluster.master_of(slot)              # the port of the master serving a slot
    cluster.failover(slot)               # CLUSTER FAILOVER on that master's replica
    cluster.pause(port), resume(port)    # SIGSTOP, SIGCONT
    cluster.stop()
"""

import os
import signal
import socket
import subprocess
import time


def _free_port_with_bus():
    """A port on 127.0.0.1 free a moment ago, whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", port + 10000))
            return port
        except OSError:
            continue


def cli(port, *args, timeout=10):
    """redis-cli's answer to one command on the node at `port`, as text."""
    run = subprocess.run(["redis-cli", "-p", str(port), *map(str, args)], capture_output=True,
                         text=True, timeout=timeout)
    return run.stdout.strip()


class RedisCluster:
    def __init__(self, workdir, masters=3, node_timeout_ms=2000):
        self.node_timeout_ms = node_timeout_ms
        self.workdir = workdir
        self.procs = {}
        self.ports = []
        for i in range(2 * masters):
            self.ports.append(self._start_node(os.path.join(workdir, f"node{i}")))
        create = subprocess.run(
            ["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in self.ports],
             "--cluster-replicas", "1", "--cluster-yes"], capture_output=True, text=True,
            timeout=60)
        if create.returncode != 0:
            raise AssertionError("redis-cli --cluster create failed:\n" + create.stdout +
                                 create.stderr)
        self.await_healthy()

    def _start_node(self, d):
        """Starts one node in `d` and returns its port once it answers PING. The port was free a
        moment ago, but another test's server may take it first (then redis-server exits): a
        node that exits is started again on another port."""
        os.makedirs(d, exist_ok=True)
        for _ in range(5):
            port = _free_port_with_bus()
            proc = subprocess.Popen(
                ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", d, "--logfile", os.path.join(d, "redis.log"),
                 "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(self.node_timeout_ms)])
            self._await(lambda: proc.poll() is not None or cli(port, "PING") == "PONG",
                        f"redis-server on {port}")
            if proc.poll() is None:
                self.procs[port] = proc
                return port
            if os.path.exists(os.path.join(d, "nodes.conf")):
                os.remove(os.path.join(d, "nodes.conf"))
        raise AssertionError(f"redis-server in {d} exited five times; see {d}/redis.log")

    @staticmethod
    def _await(predicate, what, timeout=120):
        # Generous: on a loaded machine (a sanitizer build and CPU hogs beside it) a start or a
        # failover takes many times what it takes on an idle one; a fixed budget is only a
        # guard against hanging forever.
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError(f"{what}: not so within {timeout} s")

    def await_healthy(self):
        """Waits until every node says cluster_state:ok and every replica is in sync."""
        for port in self.ports:
            self._await(lambda: "cluster_state:ok" in cli(port, "CLUSTER", "INFO"),
                        f"node {port} in a healthy cluster")
        for port in self.ports:
            self._await(lambda: self._synced(port), f"node {port} in sync")

    @staticmethod
    def _synced(port):
        info = cli(port, "INFO", "replication")
        return "role:master" in info or "master_link_status:up" in info

    def url(self):
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports[:3])

    def nodes(self, port=None):
        """CLUSTER NODES as seen by `port`: {node id: (port, flags, master id, slot ranges)}."""
        out = {}
        for line in cli(port or self.ports[0], "CLUSTER", "NODES").splitlines():
            fields = line.split()
            node_port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
            ranges = []
            for r in fields[8:]:
                if r.startswith("["):
                    continue
                first, _, last = r.partition("-")
                ranges.append((int(first), int(last or first)))
            out[fields[0]] = (node_port, fields[2], fields[3], ranges)
        return out

    def find_keys(self, pattern):
        """The keys matching `pattern` on every master (SCAN on each)."""
        keys = []
        for node_port, flags, _, _ in self.nodes().values():
            if "master" in flags and "fail" not in flags:
                out = cli(node_port, "--scan", "--pattern", pattern)
                keys += [k for k in out.splitlines() if k]
        return keys

    def keyslot(self, key):
        return int(cli(self.ports[0], "CLUSTER", "KEYSLOT", key))

    def master_of(self, slot, port=None):
        for node_port, flags, _, ranges in self.nodes(port).values():
            if "master" in flags and any(a <= slot <= b for a, b in ranges):
                return node_port
        return None

    def replica_of(self, master_port):
        """The port of a replica of the master at `master_port` (asking another node, so that
        the master may be frozen)."""
        nodes = self.nodes(next(p for p in self.ports if p != master_port))
        master_id = next(i for i, n in nodes.items() if n[0] == master_port)
        for node_port, flags, master, _ in nodes.values():
            if "slave" in flags and master == master_id:
                return node_port
        return None

    def failover(self, slot, force=False, old=None):
        """CLUSTER FAILOVER (FORCE: without the master's agreement, as when it is down) on the
        replica of the master serving `slot` (or of `old`); waits until that replica calls
        itself master. Returns (old master's port, new master's port)."""
        old = old or self.master_of(slot)
        new = self.replica_of(old)
        answer = cli(new, "CLUSTER", "FAILOVER", *(["FORCE"] if force else []))
        if answer != "OK":
            raise AssertionError(f"CLUSTER FAILOVER on {new}: {answer}")
        self._await(lambda: "role:master" in cli(new, "INFO", "replication"),
                    f"replica {new} promoted")
        return old, new

    def pause(self, port):
        """Freezes the node at `port` (SIGSTOP): it answers nothing until resume()."""
        self.procs[port].send_signal(signal.SIGSTOP)

    def resume(self, port):
        self.procs[port].send_signal(signal.SIGCONT)

    def stop(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
