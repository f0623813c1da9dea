#!/usr/bin/env python3
"""The soak (`make soak`): sluiced on Redis under mixed load for SOAK_MINUTES (default 10) while
Redis is killed, frozen and demoted on a schedule, the rules are rewritten and reloaded, and a
flood of fresh keys goes on. One sluiced per failure policy (deny, allow, local), all on one
Redis, each with keys of its own. It prints answers by status and phase, RSS over time, and
admissions against each key's exact allowance, and exits 1 when a check fails (report.py states
them). Python 3 standard library only; the launchers are tests/integration's.

    python3 bench/soak/soak.py --sluiced build/bin/sluiced [--minutes 3] [--policies deny]

Everything it measured goes to out/soak/report.json, the servers' logs to out/soak/.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "integration"))

import sluiced  # noqa: E402
import faults  # noqa: E402
import load  # noqa: E402
import report  # noqa: E402

FLOOD_RATE = 25  # Requests per second per server: 200 fresh keys a second (load.FLOOD_BATCH).
MAX_KEYS = 2000  # --max-keys: a 5 s outage floods the local store with 1,000 keys.


def parse():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sluiced", default=os.path.join(HERE, "..", "..", "build", "bin",
                                                          "sluiced"))
    parser.add_argument("--minutes", type=float,
                        default=float(os.environ.get("SOAK_MINUTES", "10")))
    parser.add_argument("--policies", default=os.environ.get("SOAK_POLICIES", "deny,allow,local"))
    parser.add_argument("--out", default=os.path.join(HERE, "..", "..", "out", "soak"))
    parser.add_argument("--rss-margin", type=float, default=0.10,
                        help="growth allowed from the first third's max to the last's: fraction")
    parser.add_argument("--rss-slack-mib", type=float, default=4.0,
                        help="... plus this many MiB")
    parser.add_argument("--healthy", type=float, default=20.0, help="seconds between faults")
    parser.add_argument("--fault", type=float, default=5.0, help="seconds each fault lasts")
    args = parser.parse_args()
    policies = [p for p in args.policies.split(",") if p]
    bad = [p for p in policies if p not in ("deny", "allow", "local")]
    if bad or not policies:
        parser.error(f"--policies: {bad or 'none'}: each must be deny, allow or local")
    if args.minutes < 1:
        parser.error(f"--minutes (SOAK_MINUTES): {args.minutes:g} is below 1")
    return args, policies


def main():
    args, policies = parse()
    sluiced.BINARY = os.path.abspath(args.sluiced)
    if not os.access(sluiced.BINARY, os.X_OK):
        sys.exit(f"soak: no sluiced at {sluiced.BINARY} (make build)")
    root = tempfile.mkdtemp(prefix="sluice-soak.",
                            dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    pair = servers = None
    try:
        pair = faults.RedisPair(root)
        with open(os.path.join(root, "rules.yaml"), "w") as f:
            f.write(load.rules(0))
        servers = {p: sluiced.Sluiced(root, "--store", pair.url, "--redis-on-failure", p,
                                      "--max-keys", str(MAX_KEYS), "--watch-interval", "1s")
                   for p in policies}
        ok = soak(args, policies, pair, servers, root)
    finally:
        for server in (servers or {}).values():
            if server.proc.poll() is None:
                server.proc.kill()
        if pair is not None:
            pair.stop()
        os.makedirs(args.out, exist_ok=True)
        for name in os.listdir(root):
            if name.startswith("sluiced") and name.endswith(".log"):
                shutil.copy(os.path.join(root, name), args.out)
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(0 if ok else 1)


def soak(args, policies, pair, servers, root):
    start = time.time()
    end = start + args.minutes * 60
    stopping = threading.Event()
    keys = {p: load.keys_for(p) for p in policies}
    floods = {p: load.Flood(p) for p in policies}
    sampler = load.Sampler(servers, pair, threading.Event())
    sampler.start()
    drivers = [d for p in policies
               for d in load.drivers(servers[p].port, keys[p], floods[p], FLOOD_RATE, stopping)]
    for d in drivers:
        d.start()
    schedule = faults.Schedule(pair, end, healthy=args.healthy, fault=args.fault)
    reloader = faults.Reloader(os.path.join(root, "rules.yaml"), load.rules,
                               list(servers.values()))
    schedule.start()
    reloader.start()
    print(f"soak: {args.minutes:g} min on Redis {pair.url}, policies {', '.join(policies)}; "
          f"work directory {root}", flush=True)
    while time.time() < end:
        time.sleep(min(30, max(0, end - time.time())))
        progress(start, schedule, sampler, policies)
    stopping.set()
    for d in drivers:
        d.join()
    schedule.stop()
    reloader.stop()
    time.sleep(3)  # The watch (1 s) finds the last version if it was not SIGHUPed.
    last_rules = {p: in_force(servers[p], 100 + reloader.version % 2) for p in policies}
    sampler.stopping.set()
    sampler.join()
    sampler.sample()
    exits = {}
    for policy, server in servers.items():
        try:
            exits[policy] = server.proc.returncode if server.proc.poll() is not None \
                else server.stop()
        except subprocess.TimeoutExpired:
            exits[policy] = "still running 10 s after SIGTERM"
    verdict = report.Soak(policies, keys, floods, sampler, schedule, reloader, exits,
                          last_rules, args.minutes, args.rss_margin, args.rss_slack_mib * 2**20,
                          {p: s.port for p, s in servers.items()})
    ok = verdict.run()
    print("\n".join(verdict.lines))
    dump(args.out, verdict, keys, floods, sampler, schedule)
    print(f"\nsoak: {'PASSED' if ok else 'FAILED'} (figures in {args.out}/report.json)")
    return ok


def progress(start, schedule, sampler, policies):
    phase = report.phase_of(time.time(), schedule.faults)
    rss = " ".join(f"{p} {sampler.rss[p][-1][1] / report.MIB:.1f}"
                   for p in policies if sampler.rss[p])
    print(f"  +{time.time() - start:4.0f} s  faults so far {len(schedule.faults)}  "
          f"{phase:10s}  RSS MiB: {rss}", flush=True)


def in_force(server, expected):
    """Whether GET /v1/rules shows `reload`'s limit of the last version written."""
    try:
        limits = server.rules_limit(load.DOMAIN + ".reload") or []
    except (OSError, ValueError):
        return False
    return any(limit.get("limit") == expected for limit in limits)


def dump(out, verdict, keys, floods, sampler, schedule):
    os.makedirs(out, exist_ok=True)
    data = {
        "verdicts": [{"ok": ok, "check": text} for ok, text in verdict.verdicts],
        "faults": schedule.faults,
        "rss": sampler.rss,
        "redis": sampler.redis,
        "counters": sampler.counters,
        "requests": {p: {k.name: k.requests for k in ks} for p, ks in keys.items()},
        "flood_requests": {p: f.requests for p, f in floods.items()},
    }
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(data, f)
    with open(os.path.join(out, "report.txt"), "w") as f:
        f.write("\n".join(verdict.lines) + "\n")


if __name__ == "__main__":
    main()
