"""The soak's figures and verdicts, from what soak.py recorded (checks.py does the judging).

The rules it holds sluiced to, per failure policy:
- deny: no key is ever admitted past its limit, in any window, whatever Redis is doing (the
  master's AOF is fsynced on every write and demotions go through FAILOVER, so no count is
  lost: a fault may only cost admissions, never add them);
- allow and local: admissions while Redis fails are the policy's (allowed, or decided from an
  empty memory store), so the limit is held only over windows where that server's Redis was
  healthy throughout: no fault of the schedule in or just before it, no failure counted;
- while Redis is surely down (a fault's down span, from 0.5 s after it began): deny answers
  503 or 429 (nothing admitted), allow answers 200 (a demoted master still reads, so its
  denials stand: 429 too), local anything (its memory store decides);
- every policy: in a healthy fixed window that saw a denial and only 200s and 429s, exactly
  the limit was admitted; no answer is a 500 (docs/redis.md promises the policy for every
  Redis error); the RSS of the last third stays within the margin of the first third's; every
  server lives to the end, loads the last rules, refuses no reload and exits 0 on SIGTERM.

The keys with long periods (a minute) are the ones that would show a count lost in a fault:
with the master's AOF off, a 1.5 min run of this soak finds 53 over-admissions there.
"""

import collections

import checks
import load
from load import FLOOD_LIMIT

SETTLE = 2.0  # Seconds after a fault before Redis counts as healthy again.
ALWAYS = lambda a, b: True  # noqa: E731
MIB = 1024 * 1024


def phase_of(t, faults):
    for kind, start, end, _, _ in faults:
        if start <= t <= end:
            return kind
        if end < t <= end + SETTLE:
            return "recovering"
    return "healthy"


def health_for(policy, faults, samples):
    counts = [(t, None if c is None else c.get("sluice_redis_failures_total", 0) +
               c.get("sluice_redis_fallbacks_total", 0)) for t, c in samples]
    return checks.Health(faults, checks.failure_spans(counts), SETTLE)


class Soak:
    """What one run recorded: servers' keys, floods and samples; the faults; the reloads."""

    def __init__(self, policies, keys, floods, sampler, schedule, reloader, exits, last_rules,
                 minutes, rss_rel, rss_abs, ports):
        self.policies, self.keys, self.floods = policies, keys, floods
        self.sampler, self.schedule, self.reloader = sampler, schedule, reloader
        self.exits, self.last_rules = exits, last_rules
        self.minutes, self.rss_rel, self.rss_abs = minutes, rss_rel, rss_abs
        self.ports = ports  # {policy: sluiced's HTTP port}
        self.verdicts = []  # (ok, text)
        self.lines = []

    def verdict(self, ok, text):
        self.verdicts.append((ok, text))

    def out(self, text=""):
        self.lines.append(text)

    def run(self):
        faults = self.schedule.faults
        kinds = collections.Counter(f[0] for f in faults)
        self.out(f"soak: {self.minutes:g} min, policies {', '.join(self.policies)}; faults: " +
                 ", ".join(f"{kind} x{kinds[kind]}" for kind in self.schedule.KINDS) +
                 f"; rules rewritten {self.reloader.sighups + self.reloader.watched} times "
                 f"({self.reloader.sighups} with SIGHUP, {self.reloader.watched} left to the "
                 "watch)")
        for error in self.sampler.errors[:5]:
            self.verdict(False, f"a sample failed: {error}")
        for error in self.schedule.errors:
            self.verdict(False, f"the schedule could not make a fault: {error}")
        self.statuses(faults)
        self.memory(faults)
        for policy in self.policies:
            self.allowance(policy, faults)
        self.lifecycle()
        self.bodies()
        self.out()
        self.out("checks:")
        for ok, text in self.verdicts:
            self.out(("  PASS " if ok else "  FAIL ") + text)
        return all(ok for ok, _ in self.verdicts)

    def statuses(self, faults):
        columns = [200, 429, 503, 500, "other", "error"]
        phases = ["healthy", "killed", "frozen", "demoted", "recovering"]
        self.out()
        self.out("answers by phase (of the request's send time; recovering: the "
                 f"{SETTLE:g} s after a fault)")
        self.out("  %-6s %-11s" % ("policy", "phase") + "".join("%9s" % c for c in columns))
        for policy in self.policies:
            table = collections.Counter()
            records = [r for key in self.keys[policy] for r in key.requests]
            records += self.floods[policy].requests
            for send, _, status in records:
                column = status if status in columns else "other"
                table[(phase_of(send, faults), column)] += 1
            for phase in phases:
                row = [table[(phase, c)] for c in columns]
                if any(row):
                    self.out("  %-6s %-11s" % (policy, phase) + "".join("%9d" % v for v in row))
            self.policy_while_down(policy, faults)
            errors = {p: table[(p, 500)] for p in phases if table[(p, 500)]}
            self.verdict(not errors, f"{policy}: no 500 answers" + (
                "; got " + ", ".join(f"{n} while {p}" for p, n in errors.items())
                if errors else ""))

    def policy_while_down(self, policy, faults):
        """deny: nothing admitted, nothing but 503 or a denial; allow: everything admitted, but
        a demoted master still reads, so its denials stand. local: any decision."""
        if policy == "local":
            return
        if policy == "deny":
            promised, said = (lambda kind: {503, 429}), "503 or 429"
        else:
            promised = lambda kind: {200, 429} if kind == "demoted" else {200}  # noqa: E731
            said = "200 (or 429 while demoted: a replica still reads)"
        wrong = collections.Counter()
        for key in self.keys[policy]:
            for status, n in checks.while_down(key.requests, faults, promised).items():
                wrong[(status, key.name)] += n
        records = self.floods[policy].requests
        for status, n in checks.while_down(records, faults, promised).items():
            wrong[(status, "flood")] += n
        self.verdict(not wrong, f"{policy}: every answer while Redis was down (killed, frozen, "
                     f"demoted; from 0.5 s in) is {said}" + (
                         "; got " + ", ".join(f"{n} x {s} ({k})" for (s, k), n in sorted(
                             wrong.items(), key=str)) if wrong else ""))

    def memory(self, faults):
        self.out()
        self.out("RSS of sluiced (MiB), every 30 s; Redis's used_memory (MiB) and keys")
        self.out("  %7s %-11s" % ("t (s)", "phase") +
                 "".join("%8s" % p for p in self.policies) + "%9s %8s" % ("redis", "keys"))
        series = self.sampler.rss
        t0 = min(s[0][0] for s in series.values() if s)
        step = 30
        redis = self.sampler.redis
        for mark in range(0, int(max(s[-1][0] for s in series.values() if s) - t0) + 1, step):
            row = "  %7d %-11s" % (mark, phase_of(t0 + mark, faults))
            for policy in self.policies:
                near = min(series[policy], key=lambda s: abs(s[0] - t0 - mark), default=None)
                row += "%8.1f" % (near[1] / MIB) if near else "%8s" % "-"
            r = min(redis, key=lambda s: abs(s[0] - t0 - mark), default=None)
            row += "%9s %8s" % ("%.1f" % (r[1] / MIB) if r and r[1] else "-",
                                r[2] if r and r[2] is not None else "-")
            self.out(row)
        for policy in self.policies:
            first, last, bound, ok = checks.rss_growth(series[policy], self.rss_rel, self.rss_abs)
            if first is None:
                self.verdict(False, f"{policy}: too few RSS samples")
                continue
            t0, t1 = series[policy][0][0], series[policy][-1][0]
            trend = checks.slope(series[policy], t0 + (t1 - t0) / 3) * 60 / MIB
            self.verdict(ok, f"{policy}: RSS of the last third {last / MIB:.1f} MiB within "
                         f"{bound / MIB:.1f} MiB (first third's max {first / MIB:.1f} MiB "
                         f"+ {self.rss_rel:.0%} + {self.rss_abs / MIB:g} MiB); trend over the "
                         f"last two thirds {trend:+.3f} MiB/min")

    def allowance(self, policy, faults):
        health = health_for(policy, faults, self.sampler.counters[policy])
        applies = ALWAYS if policy == "deny" else health.healthy
        where = "in every window" if policy == "deny" else "in every healthy window"
        self.out()
        self.out(f"{policy}: admitted against the allowance, per key (over-admission checked "
                 f"{where}; exact: healthy windows with a denial, admitted / expected; for "
                 "gcra, max/lim is the closest any run of admissions came to B + t/I, as "
                 "admissions - allowance: never above 0)")
        self.out("  %-20s %9s %8s %9s %8s %6s %15s" % (
            "key", "admitted", "windows", "checked", "max/lim", "over", "exact"))
        over = missed = 0
        for key in self.keys[policy]:
            if key.kind == "gcra":
                n, period, burst = key.limits[0]
                r = checks.gcra(key.requests, n, period, burst, applies)
                over += len(r.over)
                self.out("  %-20s %9d %8s %9d %8s %6d %15s" % (
                    key.name, r.admitted, "-", r.checked, "%+.2f" % r.worst if r.checked else "-",
                    len(r.over), "-"))
                continue
            for i, (n, period) in enumerate(key.limits):
                exact = health.healthy if key.exact else None
                r = checks.fixed_window(key.requests, n, period, applies, exact)
                over += len(r.over)
                missed += len(r.exact_missed)
                name = key.name if i == 0 else "  (%d/%gs)" % (n, period)
                hits = r.exact_checked - len(r.exact_missed)
                self.out("  %-20s %9d %8d %9d %8s %6d %15s" % (
                    name, r.admitted, r.windows, r.checked, f"{r.max_in_window}/{n}",
                    len(r.over), f"{hits}/{r.exact_checked}" if key.exact else "-"))
                for a, count, possible in r.exact_missed[:5]:
                    self.out(f"      window at {a:.0f}: {count} to {possible} admitted, "
                             f"limit {n}")
        over += self.flood(policy, applies)
        self.verdict(over == 0, f"{policy}: no over-admission {where} ({over} found)")
        self.verdict(missed == 0, f"{policy}: exactly the limit in every healthy window that "
                     f"saw a denial ({missed} windows not)")

    def flood(self, policy, applies):
        by_value = collections.defaultdict(list)
        for value, send, recv, status in self.floods[policy].records:
            by_value[value].append((send, recv, status))
        over = admitted = windows = checked = 0
        n, period = FLOOD_LIMIT
        for requests in by_value.values():
            r = checks.fixed_window(requests, n, period, applies, None)
            over += len(r.over)
            admitted += r.admitted
            windows += r.windows
            checked += r.checked
        self.out("  %-20s %9d %8d %9d %8s %6d %15s" % (
            f"flood: {len(by_value)} keys", admitted, windows, checked, f"-/{n}", over, "-"))
        return over

    def bodies(self):
        ports = {server_port: policy for policy, server_port in self.ports.items()}
        if load.Client.bodies:
            self.out()
            self.out("answers other than 200 and 429, per server, path and body (numbers as #):")
        for (port, path, status), bodies in sorted(load.Client.bodies.items()):
            for body, n in bodies.most_common():
                self.out(f"  {ports.get(port, port)} {path} {status} x{n}: "
                         f"{body.decode(errors='replace')}")

    def lifecycle(self):
        for policy in self.policies:
            samples = [c for _, c in self.sampler.counters[policy] if c]
            last = samples[-1] if samples else {}
            refused = last.get("sluice_config_reload_failures_total")
            self.out(f"{policy}: reloads done {last.get('sluice_config_reloads_total')}, "
                     f"refused {refused}")
            self.verdict(refused == 0, f"{policy}: no reload refused")
            self.verdict(self.last_rules.get(policy, False),
                         f"{policy}: the last rules written were in force at the end")
            self.verdict(self.exits.get(policy) == 0,
                         f"{policy}: sluiced ran to the end and exited 0 on SIGTERM "
                         f"(got {self.exits.get(policy)})")

