#!/usr/bin/env python3
"""Every test a preset selects is built by that preset (issue 32).

A build preset with a `targets` list (tsan: TSan builds are slow, so it builds only what its
tests need) builds only those. A test the matching test preset selects (by its filter: the
label `concurrent` for tsan) whose program is not among them does not fail: gtest's discovery
turns it into `<target>_NOT_BUILT`, which has no label, so the filter drops it, and the tests
meant to run under the sanitizer silently never do.

This check reads CMakePresets.json for each test preset whose configure preset's build presets
all list targets, asks ctest which tests the preset's filter selects in a build tree where
every target is built (the release one: labels come from CMake, not from a list kept here),
and maps each selected test's command to the programs it runs (its executable, or a program
passed to a script, e.g. `--sluiced build/bin/sluiced`) through the executables CMake wrote to
EXECUTABLES. It fails naming each program missing from a preset, the preset and a test.

    python3 tests/layout/preset_targets_test.py --presets CMakePresets.json \
        --build-dir build --ctest ctest --executables build/tests/executables.tsv
"""

import argparse
import json
import os
import subprocess
import sys


def resolve(presets, name):
    """The preset named `name` with what it inherits filled in (its own fields win)."""
    by_name = {p["name"]: p for p in presets}
    if name not in by_name:
        sys.exit(f"preset_targets: no preset named {name!r} in CMakePresets.json")
    preset = dict(by_name[name])
    parents = preset.get("inherits", [])
    for parent in [parents] if isinstance(parents, str) else parents:
        for key, value in resolve(presets, parent).items():
            preset.setdefault(key, value)
    return preset


def ctest_tests(ctest, build_dir, args):
    """The tests ctest lists in build_dir with `args` (its filters), as json-v1 objects."""
    out = subprocess.run([ctest, "--test-dir", build_dir, "--show-only=json-v1", *args],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)["tests"]


def filter_args(test_preset):
    """The ctest options that select what the test preset's `filter` selects."""
    f = test_preset.get("filter", {})
    args = []
    for side, label_opt, name_opt in (("include", "-L", "-R"), ("exclude", "-LE", "-E")):
        part = f.get(side, {})
        if "label" in part:
            args += [label_opt, part["label"]]
        if "name" in part:
            args += [name_opt, part["name"]]
    return args


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--presets", required=True)
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--ctest", default="ctest")
    parser.add_argument("--executables", required=True,
                        help="path<TAB>target lines, every executable target of the build")
    args = parser.parse_args()

    with open(args.presets) as f:
        presets = json.load(f)
    with open(args.executables) as f:
        targets_by_path = {os.path.realpath(path): target
                           for path, target in (line.rstrip("\n").split("\t") for line in f)}

    # Labels are known only for tests whose program is built here; a test not built would be
    # dropped by every label filter, as in the bug this guards against.
    not_built = sorted(t["name"].removesuffix("_NOT_BUILT")
                       for t in ctest_tests(args.ctest, args.build_dir, [])
                       if t["name"].endswith("_NOT_BUILT"))
    if not_built:
        print(f"preset_targets: {', '.join(not_built)} not built in {args.build_dir}, so the "
              "labels of their tests are unknown: build every target first (cmake --build "
              "--preset release)")
        return 1

    configure = presets.get("configurePresets", [])
    build = [resolve(presets["buildPresets"], p["name"]) for p in presets.get("buildPresets", [])]
    failures, checked = [], 0
    for raw in presets.get("testPresets", []):
        test_preset = resolve(presets["testPresets"], raw["name"])
        configure_name = test_preset.get("configurePreset")
        resolve(configure, configure_name)  # fails loudly on a name that is not there
        builders = [b for b in build if b.get("configurePreset") == configure_name]
        if not builders or any("targets" not in b for b in builders):
            continue  # some build preset of this tree builds every target
        built = {t for b in builders for t in
                 ([b["targets"]] if isinstance(b["targets"], str) else b["targets"])}
        names = ", ".join(b["name"] for b in builders)
        missing = {}  # target -> a test that needs it
        selected = ctest_tests(args.ctest, args.build_dir, filter_args(test_preset))
        for test in selected:
            for word in test.get("command", []):
                target = targets_by_path.get(os.path.realpath(word))
                if target is not None and target not in built:
                    missing.setdefault(target, test["name"])
        checked += 1
        print(f"test preset {test_preset['name']!r}: {len(selected)} tests, build preset(s) "
              f"{names}: {len(built)} targets")
        for target, test in sorted(missing.items()):
            failures.append(
                f"{target} is not built by build preset(s) {names}, yet test preset "
                f"{test_preset['name']!r} (filter {json.dumps(test_preset.get('filter', {}))}) "
                f"selects a test that runs it ({test}): add it to the targets of build preset "
                f"{names} in CMakePresets.json (a gtest program left out becomes "
                f"{target}_NOT_BUILT, which has no label, so the filter drops it unseen)")
    for failure in failures:
        print("FAIL: " + failure)
    if checked == 0:
        print("preset_targets: no build preset lists targets: every preset builds everything")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
