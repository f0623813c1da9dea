"""What happens to sluiced's Redis during the soak, and to its rules.

RedisPair: the master sluiced uses (tests/integration/redis_test.py's Redis, with an
append-only file fsynced on every write, so a SIGKILL loses no charge Redis acknowledged and a
restart comes back with every count) and a standby replicating it. The faults:

- killed: SIGKILL, down for a while, started again on the same port (it reloads its AOF);
- frozen: SIGSTOP, then SIGCONT;
- demoted: `FAILOVER TO` the standby (Redis pauses writes until the standby has every one,
  then the master becomes its replica: REPLICAOF), so sluiced's Redis answers READONLY; then
  `FAILOVER TO` back. Done this way no count is lost, so the soak can hold sluiced to its
  limits through a demotion: a bare REPLICAOF would throw away the master's data.

Schedule runs them one at a time with healthy spells between, recording [(kind, start, end)]
(end: when Redis is as before). Reloader rewrites the rules file every few seconds (atomically,
as a deployment would), alternately sending SIGHUP and leaving it to --watch-interval.
"""

import os
import signal
import subprocess
import threading
import time

from redis_cluster import RedisCluster, cli
from redis_test import Redis


class RedisPair:
    def __init__(self, root):
        os.makedirs(os.path.join(root, "master"))
        os.makedirs(os.path.join(root, "standby"))
        self.master = Redis(os.path.join(root, "master"), "--appendonly", "yes",
                            "--appendfsync", "always")
        self.standby = Redis(os.path.join(root, "standby"), "--replicaof", "127.0.0.1",
                             str(self.master.port))
        self.await_synced()

    @property
    def url(self):
        return self.master.url

    # Polls until the predicate holds; AssertionError after 30 s.
    _await = staticmethod(RedisCluster._await)

    def _info(self, redis):
        return cli(redis.port, "INFO", "replication", timeout=5)

    def await_synced(self):
        self._await(lambda: "master_link_status:up" in self._info(self.standby),
                    "the standby in sync with the master")

    # Each fault returns (down_start, down_end): when Redis was surely of no use to sluiced.

    def kill(self, seconds):
        down = time.time()
        self.master.proc.kill()
        self.master.proc.wait()
        time.sleep(seconds)
        up = time.time()
        self.master.start()  # Waits for PONG: the AOF is loaded.
        return down, up

    def freeze(self, seconds):
        down = time.time()
        self.master.proc.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        up = time.time()
        self.master.proc.send_signal(signal.SIGCONT)
        return down, up

    def demote(self, seconds):
        self.await_synced()
        self._failover(self.master, self.standby)
        down = time.time()  # The master is a replica now: READONLY.
        time.sleep(seconds)
        up = time.time()
        self._failover(self.standby, self.master)
        return down, up

    def _failover(self, old, new):
        answer = cli(old.port, "FAILOVER", "TO", "127.0.0.1", new.port, "TIMEOUT", 5000)
        if answer != "OK":
            raise RuntimeError(f"FAILOVER TO {new.port} on {old.port}: {answer}")
        self._await(lambda: "role:master" in self._info(new), f"{new.port} promoted")
        self._await(lambda: "master_link_status:up" in self._info(old),
                    f"{old.port} replicating {new.port}")

    def memory(self):
        """(used_memory, keys) of the master, or (None, None) if it does not answer now (down,
        frozen)."""
        try:
            info = cli(self.master.port, "INFO", "memory", timeout=0.5)
            keys = cli(self.master.port, "DBSIZE", timeout=0.5)
        except subprocess.TimeoutExpired:
            return None, None
        used = next((int(line.split(":")[1]) for line in info.splitlines()
                     if line.startswith("used_memory:")), None)
        return used, int(keys) if keys.isdigit() else None

    def stop(self):
        for redis in (self.standby, self.master):
            if redis.proc.poll() is None:
                redis.proc.send_signal(signal.SIGCONT)
                redis.stop()


class Schedule(threading.Thread):
    """Faults one after another, each after `healthy` seconds of peace, until `end`
    (time.time()); none starts unless it and a healthy spell after it fit before then."""

    KINDS = ("killed", "frozen", "demoted")

    def __init__(self, pair, end, healthy=20.0, fault=5.0):
        super().__init__(daemon=True)
        self.pair, self.end, self.healthy, self.fault = pair, end, healthy, fault
        self.faults = []   # (kind, start, end, down_start, down_end), time.time().
        self.errors = []   # A fault the harness could not make (a finding about the soak).
        self.stopping = threading.Event()

    def run(self):
        actions = {"killed": self.pair.kill, "frozen": self.pair.freeze,
                   "demoted": self.pair.demote}
        n = 0
        while not self.stopping.wait(self.healthy):
            if time.time() + self.fault + 10 + self.healthy > self.end:
                return
            kind = self.KINDS[n % len(self.KINDS)]
            n += 1
            start = down = time.time()
            try:
                down = actions[kind](self.fault)
            except (AssertionError, RuntimeError, OSError, subprocess.TimeoutExpired) as e:
                self.errors.append(f"{kind} at {time.ctime(start)}: {e}")
            self.faults.append((kind, start, time.time(), *(down or (start, start))))

    def stop(self):
        self.stopping.set()
        self.join()


class Reloader(threading.Thread):
    """Every `every` seconds writes rules(n) over `path` (n counting up), then SIGHUPs the
    servers on odd n (even n: the servers' watch finds the change)."""

    def __init__(self, path, rules, servers, every=6.0):
        super().__init__(daemon=True)
        self.path, self.rules, self.servers, self.every = path, rules, servers, every
        self.sighups = self.watched = self.version = 0
        self.stopping = threading.Event()

    def run(self):
        n = 0
        while not self.stopping.wait(self.every):
            n += 1
            tmp = self.path + ".new"
            with open(tmp, "w") as f:
                f.write(self.rules(n))
            os.replace(tmp, self.path)
            self.version = n
            if n % 2:
                self.sighups += 1
                for server in self.servers:
                    server.proc.send_signal(signal.SIGHUP)
            else:
                self.watched += 1

    def stop(self):
        self.stopping.set()
        self.join()
