#!/usr/bin/env python3
"""No test asserts that something happened fast (docs/development.md: timings live in bench/).

Scans tests/ (C++ and Python) for assertions that put an upper bound on elapsed real time:
`EXPECT_LT(Clock::now() - start, 3s)`, `self.assertLess(time.monotonic() - began, 5)`,
`assert elapsed < 2`, and the like. Such a bound holds on a quiet machine and fails on a busy
one; assert an event, a count, or a figure on an injected clock instead.

What counts as elapsed real time in an assertion: a read of a real clock (`::now()` of a
std::chrono clock, `time.monotonic()`, `time.time()`, `time.perf_counter()`), a name that was
assigned from one in the same file (`start = time.monotonic()`), or a name that says it
holds one (`elapsed`, `took`, `slowest`). An upper bound is such a term on the
small side of a comparison (the first argument of EXPECT_LT/LE, ASSERT_LT/LE, assertLess,
assertLessEqual; the second of the GT/GE forms; the left of `<`, the right of `>` in a
boolean assertion).

Not flagged: lower bounds (`assertGreaterEqual(answered - spawned, TTL)`: a slot not given
before its lease ends), which a busy machine only makes easier to meet; and clocks injected
into the code under test (`clock.Now()`, a ManualClock), which are not real time. A watchdog,
an assertion that fails only when an awaited event never comes (`self.assertLess(
time.monotonic(), deadline, "no datagram")` in a polling loop), is allowed with the marker
comment `sluice-timing: watchdog` on the assertion's lines or the line above it; the bound
must be generous enough never to be why a test passes.

    python3 tests/layout/timing_asserts_test.py --root .        # scan; exit 1 on a finding
    python3 tests/layout/timing_asserts_test.py --selftest      # the checker on snippets

Python 3 standard library only.
"""

import argparse
import os
import re
import sys
import unittest

MARKER = "sluice-timing: watchdog"

# Reads of a real clock. `Now()` (sluice's Clock interface) is left out: tests inject it.
CLOCK_READ = re.compile(
    r"(\b\w*(?:clock|Clock)::now\s*\(\s*\))"
    r"|(\btime\.(?:monotonic|time|perf_counter)(?:_ns)?\s*\(\s*\))"
    r"|(\bdatetime\.(?:datetime\.)?now\s*\()")
# Names that say they hold an elapsed time.
ELAPSED_NAME = re.compile(r"\b(?:elapsed\w*|\w+_elapsed|took|took_\w+|slowest)\b")

CPP_ASSERT = re.compile(r"\b(?:EXPECT|ASSERT)_(LT|LE|GT|GE|TRUE|FALSE)\s*\(")
PY_ASSERT = re.compile(
    r"\bself\.assert(Less|LessEqual|Greater|GreaterEqual|True|False)\s*\(|^\s*assert\b(?!\w)",
    re.M)


def strip_strings_and_comments(text, python):
    """`text` with string literals emptied and comments blanked, lengths kept (so offsets and
    lines still match the source)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if python and c == "#" or not python and text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif not python and text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and not python and i > 0 and text[i - 1].isalnum():
            out.append(c)  # A C++ digit separator (1'000), or the end of a prefix (u8'x').
            i += 1
        elif c in "\"'":
            quote = text[i:i + 3] if python and text[i:i + 3] in ('"""', "'''") else c
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                if text[j] == "\\":
                    j += 1
                elif text[j] == "\n" and len(quote) == 1:
                    break
                j += 1
            if j < n and text[j] == "\n":  # Unterminated on its line: keep the newline.
                out.append(c + re.sub(r"[^\n]", " ", text[i + 1:j]))
                i = j
                continue
            j = min(n, j + len(quote))
            out.append(quote + re.sub(r"[^\n]", " ", text[i + len(quote):j - len(quote)]) +
                       quote)
            i = j
        elif not python and c == "R" and text.startswith('R"(', i):  # A raw string.
            j = text.find(')"', i)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def clock_names(code):
    """Names assigned from a real clock read in `code` (start = time.monotonic(), const auto
    until = Clock::now() + 30s)."""
    names = set()
    for m in re.finditer(r"\b(\w+)\s*=(?!=)([^;\n]*)", code):
        if CLOCK_READ.search(m.group(2)):
            names.add(m.group(1))
    return names


def durations(code, names):
    """Names assigned from a difference that holds elapsed real time (waited =
    time.monotonic() - t0; const auto took = Clock::now() - start): elapsed themselves, bare."""
    found = set()
    for m in re.finditer(r"\b(\w+)\s*=(?!=)([^;\n]*)", code):
        if re.search(r"-(?!>)", m.group(2)) and is_elapsed(m.group(2), names):
            found.add(m.group(1))
    return found


def is_elapsed(expr, names, elapsed=frozenset()):
    """Whether `expr` holds elapsed real time: a clock read, an elapsed name, or a difference
    with a name that holds a clock read (`answered - taken`). A clock name in a sum alone
    (`before + used * 360`, a server's time against the time before the request) is a point
    in time, not an elapsed one."""
    if CLOCK_READ.search(expr) or ELAPSED_NAME.search(expr):
        return True
    if any(re.search(r"\b%s\b" % re.escape(name), expr) for name in elapsed):
        return True
    return any(re.search(r"\b%s\b\s*-(?!>)|-\s*\b%s\b" % (re.escape(name), re.escape(name)),
                         expr) for name in names)


def balanced(code, open_at):
    """The text inside the parenthesis that opens at `open_at`, and the offset past it."""
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] in "([{":
            depth += 1
        elif code[j] in ")]}":
            depth -= 1
            if depth == 0:
                return code[open_at + 1:j], j + 1
    return code[open_at + 1:], len(code)


def split_top(text, separators):
    """`text` split at `separators` (a regex) outside brackets."""
    parts, depth, last = [], 0, 0
    sep = re.compile(separators)
    i = 0
    while i < len(text):
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0:
            m = sep.match(text, i)
            if m and m.end() > i:
                parts.append(text[last:i])
                last = i = m.end()
                continue
        i += 1
    parts.append(text[last:])
    return parts


def upper_bound_in_boolean(expr, names, negated, elapsed=frozenset()):
    """Whether a boolean assertion's `expr` bounds elapsed time from above (a clause
    `elapsed < x` or `x > elapsed`; reversed when the assertion is EXPECT_FALSE/assertFalse)."""
    for clause in split_top(expr, r"\s*(?:&&|\|\||\band\b|\bor\b)\s*"):
        clause = clause.strip()
        while clause.startswith("(") and balanced(clause, 0)[1] == len(clause):
            clause = clause[1:-1].strip()
        clause = re.sub(r"^(?:not\b|!)\s*", "", clause)
        m = None
        for m in re.finditer(r"<=|>=|(?<![<>-])<(?![<=])|(?<![<>-])>(?![>=])", clause):
            pass  # The last comparison of the clause: left and right around it.
        if m is None:
            continue
        left, right = clause[:m.start()], clause[m.end():]
        less = m.group(0).startswith("<")
        if negated:
            less = not less
        small = left if less else right
        if is_elapsed(small, names, elapsed):
            return True
    return False


def findings(text, python):
    """(line, text of the line) of each upper bound on elapsed time asserted in `text`."""
    code = strip_strings_and_comments(text, python)
    names = clock_names(code)
    elapsed = durations(code, names)
    raw_lines = text.split("\n")
    found = []
    pattern = PY_ASSERT if python else CPP_ASSERT
    for m in pattern.finditer(code):
        kind = m.group(1)
        if kind is None:  # Python's assert statement: to the end of its logical line.
            start = m.end()
            end = start
            depth = 0
            while end < len(code) and (code[end] != "\n" or depth > 0):
                depth += code[end] in "([{"
                depth -= code[end] in ")]}"
                end += 1
            expr = split_top(code[start:end], r",")[0]
            bad = upper_bound_in_boolean(expr, names, negated=False, elapsed=elapsed)
        else:
            inside, end = balanced(code, m.end() - 1)
            args = split_top(inside, r",")
            if kind in ("TRUE", "FALSE", "True", "False"):
                bad = upper_bound_in_boolean(args[0], names, negated=kind in ("FALSE", "False"),
                                             elapsed=elapsed)
            elif kind in ("LT", "LE", "Less", "LessEqual"):
                bad = is_elapsed(args[0], names, elapsed)
            else:  # GT, GE, Greater, GreaterEqual: the second is the smaller.
                bad = len(args) > 1 and is_elapsed(args[1], names, elapsed)
        if not bad:
            continue
        first = code.count("\n", 0, m.start())
        last = code.count("\n", 0, end)
        span = raw_lines[max(0, first - 1):last + 1]
        if any(MARKER in line for line in span):
            continue
        found.append((first + 1, raw_lines[first].strip()))
    return found


def scan(root):
    bad = []
    tests = os.path.join(root, "tests")
    for folder, dirs, files in os.walk(tests):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", "node_modules", "data"))
        for name in sorted(files):
            python = name.endswith(".py")
            if not (python or name.endswith((".cc", ".h"))):
                continue
            path = os.path.join(folder, name)
            if os.path.abspath(path) == os.path.abspath(__file__):
                continue  # Its own snippets.
            with open(path, encoding="utf-8") as f:
                text = f.read()
            for line, source in findings(text, python):
                bad.append(f"{os.path.relpath(path, root)}:{line}: {source}")
    return bad


class SelfTest(unittest.TestCase):
    def found(self, snippet, python):
        return [line for line, _ in findings(snippet, python)]

    def test_cpp_upper_bounds_are_found(self):
        self.assertEqual(self.found(
            "const Clock::time_point start = Clock::now();\n"
            "auto d = store->Decide(limit, key, 1, now);\n"
            "EXPECT_LT(Clock::now() - start, 2 * options.timeout + 300ms) << key;\n", False), [3])
        self.assertEqual(self.found(
            "EXPECT_LT(std::chrono::steady_clock::now() - start, 30s);\n", False), [1])
        self.assertEqual(self.found(
            "const auto took = Since(start);\nEXPECT_LE(took, 3s);\n", False), [2])
        self.assertEqual(self.found(
            "ASSERT_GT(kTimeout + kSlack,\n          SteadyClock::now() - t0);\n", False), [1])
        # Digit separators and character literals keep the lines counted right.
        self.assertEqual(self.found(
            "const int64_t n = 1'000'000;\nchar c = '\\'';\n"
            "EXPECT_LT(Clock::now() - start, 30s);\n", False), [3])
        self.assertEqual(self.found(
            "auto begin = std::chrono::steady_clock::now();\nRun();\n"
            "EXPECT_TRUE(std::chrono::steady_clock::now() - begin < 1s);\n", False), [3])
        self.assertEqual(self.found(
            "auto t0 = SteadyClock::now();\nEXPECT_FALSE(SteadyClock::now() - t0 >= 1s);\n",
            False), [2])

    def test_python_upper_bounds_are_found(self):
        self.assertEqual(self.found(
            "began = time.monotonic()\nstatus = check()\n"
            "self.assertLess(time.monotonic() - began, 5)  # Within the timeout.\n", True), [3])
        self.assertEqual(self.found(
            "back = time.monotonic()\nwait()\nself.assertLess(time.monotonic() - back, 3)\n",
            True), [3])
        self.assertEqual(self.found(
            "taken = time.monotonic()\nanswered = time.monotonic()\n"
            "self.assertLess(answered - taken, TTL + 20)\n", True), [3])
        self.assertEqual(self.found("self.assertLess(slowest, bound, 'an answer took')\n",
                                    True), [1])
        self.assertEqual(self.found(
            "t = time.time()\nrun()\nassert time.time() - t < 2, 'too slow'\n", True), [3])
        self.assertEqual(self.found(
            "elapsed = time.perf_counter() - t\nself.assertGreater(\n    2.0, elapsed)\n",
            True), [2])
        self.assertEqual(self.found(
            "start = time.monotonic()\nself.assertTrue(ok and time.monotonic() - start <= 1)\n",
            True), [2])
        # A name holding a difference of clock reads, compared bare.
        self.assertEqual(self.found(
            "t0 = time.monotonic()\nrun()\nwaited = time.monotonic() - t0\n"
            "self.assertLess(waited, 5)\n", True), [4])

    def test_watchdogs_with_the_marker_are_allowed(self):
        self.assertEqual(self.found(
            "deadline = time.monotonic() + 60\nwhile not seen():\n"
            "    # sluice-timing: watchdog\n"
            "    self.assertLess(time.monotonic(), deadline, 'no datagram')\n", True), [])
        self.assertEqual(self.found(
            "const auto watchdog = std::chrono::steady_clock::now() + 60s;\n"
            "while (!answered) {\n"
            "  EXPECT_LT(std::chrono::steady_clock::now(), watchdog)  // sluice-timing: watchdog\n"
            "      << \"Redis never answered\";\n}\n", False), [])
        # Without the marker the same watchdog is found: the marker is the exception.
        self.assertEqual(self.found(
            "deadline = time.monotonic() + 60\n"
            "self.assertLess(time.monotonic(), deadline, 'no datagram')\n", True), [2])

    def test_loops_lower_bounds_and_injected_clocks_are_not_timing_assertions(self):
        # A watchdog loop that asserts the event it waited for.
        self.assertEqual(self.found(
            "deadline = time.monotonic() + 120\n"
            "while time.monotonic() < deadline and not done():\n    time.sleep(0.01)\n"
            "self.assertTrue(done(), 'never done')\n", True), [])
        self.assertEqual(self.found(
            "const auto until = SteadyClock::now() + 300s;\n"
            "while (SteadyClock::now() < until && !Ready()) {}\nASSERT_TRUE(Ready());\n",
            False), [])
        # Lower bounds: not before its turn.
        self.assertEqual(self.found(
            "spawned = time.monotonic()\nanswered = time.monotonic()\n"
            "self.assertGreaterEqual(answered - spawned, TTL)\n"
            "self.assertTrue(free == 0 or time.monotonic() - spawned >= TTL, free)\n", True), [])
        self.assertEqual(self.found(
            "const auto start = std::chrono::steady_clock::now();\n"
            "EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);\n", False), [])
        # An injected clock, and figures that are durations but not elapsed real time.
        self.assertEqual(self.found(
            "before = time.time()\nreset = fetch()\n"
            "self.assertGreaterEqual(reset, int(before) + used * 360)\n", True), [])
        self.assertEqual(self.found(
            "ManualClock clock;\nEXPECT_LT(clock.Now() - start, 5s);\n"
            "EXPECT_EQ(d->retry_after, 999'000us);\n"
            "EXPECT_LE(retry, kTtl);\n", False), [])
        # Strings and comments that speak of time are not code.
        self.assertEqual(self.found(
            "self.assertLess(n, 3, 'took time.monotonic() - t')  # elapsed < 3\n", True), [])
        self.assertEqual(self.found(
            "EXPECT_LT(n, 3) << \"took \" << \"Clock::now() - t\";  // elapsed < 3\n", False),
            [])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", help="the repository to scan")
    parser.add_argument("--selftest", action="store_true", help="run the checker's own tests")
    args = parser.parse_args()
    if args.selftest:
        result = unittest.main(argv=[sys.argv[0]], exit=False).result
        return 0 if result.wasSuccessful() else 1
    if not args.root:
        parser.error("--root or --selftest")
    bad = scan(args.root)
    for line in bad:
        print(line)
    if bad:
        print(f"{len(bad)} assertion(s) bound elapsed real time from above: a busy machine "
              "fails them. Assert an event, a count or an injected clock's figure instead; a "
              f"watchdog on an awaited event may carry the comment '{MARKER}' "
              "(tests/layout/timing_asserts_test.py).", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
