#!/usr/bin/env python3
"""scripts/mutants.py: does the test suite catch deliberate bugs? (`make mutants`)

Copies the working tree (tracked files and untracked ones git does not ignore) to a scratch
directory, builds it once, runs every mutant's tests on the unchanged copy (they must pass), then
applies each mutant of tests/mutants.ini in turn: change one line, rebuild the mutant's targets,
run its tests, restore the line. Prints a table "mutant / tests that caught it" and exits 1 if
any mutant survived (or its tests failed before the change, or it did not build).

  scripts/mutants.py [--work DIR] [--only NAME[,NAME...]] [--list FILE] [--jobs N]

--work DIR   the scratch copy and its build (default $TMPDIR/gatedgpt-mutants); kept between
             runs, so a second run rebuilds only what changed
--only       run only these mutants (names from the list)
Standard library only. Time: about 37 minutes on 2 cores from an empty scratch directory for the
120 mutants (2026-12-05; the first build, the unchanged tree's tests and the CUDA emulator's rebuilds); docs/architecture.md, "Mutation check".
"""
import argparse
import configparser
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(cmd, cwd, log=None, env=None):
    """run cmd (a list); returns (rc, output)"""
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if log:
        with open(log, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{p.stdout}\n")
    return p.returncode, p.stdout


def copy_tree(src, dst):
    """the files git would commit (tracked + untracked, not ignored), as they are now"""
    rc, out = sh(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], src)
    if rc != 0:
        sys.exit(f"error: mutants: git ls-files failed in {src}: {out.strip()}")
    n = 0
    for rel in out.split("\0"):
        if not rel or not os.path.isfile(os.path.join(src, rel)):
            continue
        d = os.path.join(dst, rel)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        s = os.path.join(src, rel)
        # copy only what differs: an unchanged file keeps its time, so the build stays incremental
        if os.path.exists(d) and open(s, "rb").read() == open(d, "rb").read():
            continue
        shutil.copy2(s, d)
        n += 1
    return n


def load(path):
    cp = configparser.RawConfigParser(comment_prefixes=("#",), inline_comment_prefixes=None)
    cp.optionxform = str
    cp.read(path)
    out = []
    for name in cp.sections():
        m = dict(cp[name])
        for k in ("file", "find", "replace", "targets", "tests", "why"):
            if not m.get(k):
                sys.exit(f"error: {path}: [{name}]: missing '{k}' (every mutant needs file, find, replace, targets, tests, why)")
        m["name"] = name
        out.append(m)
    return out


def failed_tests(out):
    """names of the tests ctest lists as failed"""
    names = re.findall(r"^\s*\d+ - (\S+) \(", out.split("The following tests FAILED:")[-1], re.M) \
        if "The following tests FAILED:" in out else []
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "gatedgpt-mutants"))
    ap.add_argument("--only", default="")
    ap.add_argument("--list", default=os.path.join(ROOT, "tests", "mutants.ini"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    a = ap.parse_args()
    mutants = load(a.list)
    if a.only:
        want = set(a.only.split(","))
        unknown = want - {m["name"] for m in mutants}
        if unknown:
            sys.exit(f"error: --only: no mutant named {', '.join(sorted(unknown))} in {a.list}")
        mutants = [m for m in mutants if m["name"] in want]
    src = os.path.join(a.work, "src")
    build = os.path.join(src, "build")
    log = os.path.join(a.work, "mutants.log")
    os.makedirs(src, exist_ok=True)
    open(log, "w").close()
    t_start = time.time()
    n = copy_tree(ROOT, src)
    print(f"mutants: {len(mutants)} from {os.path.relpath(a.list, ROOT)}; scratch copy {src} ({n} files updated); log {log}", flush=True)

    # every mutant's find text occurs exactly once (else the list is stale: say which)
    for m in mutants:
        text = open(os.path.join(src, m["file"]), encoding="utf-8").read()
        c = text.count(m["find"])
        if c != 1:
            sys.exit(f"error: {a.list}: [{m['name']}]: 'find' occurs {c} times in {m['file']} (needs exactly 1): update the list")

    # configured every time (a few seconds): a reused scratch copy may have new targets (the
    # file globs and tests/CMakeLists.txt are read at configure time)
    rc, out = sh(["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"], src, log)
    if rc != 0:
        sys.exit(f"error: mutants: cmake configure failed (log {log})")
    targets = sorted({t for m in mutants for t in m["targets"].split()})
    print(f"mutants: building {' '.join(targets)} ...", flush=True)
    rc, out = sh(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + targets, src, log)
    if rc != 0:
        sys.exit(f"error: mutants: the unchanged tree does not build (log {log})")

    # the tests pass before any change (else a failure says nothing about a mutant)
    regex = "|".join(sorted({m["tests"] for m in mutants}))
    t0 = time.time()
    rc, out = sh(["ctest", "-R", regex, "--output-on-failure"], build, log)
    if rc != 0:
        sys.exit(f"error: mutants: on the unchanged tree these tests fail: {', '.join(failed_tests(out)) or '?'} (log {log})")
    print(f"mutants: the unchanged tree passes its tests ({time.time() - t0:.0f} s)", flush=True)

    rows, survived = [], 0
    for i, m in enumerate(mutants):
        path = os.path.join(src, m["file"])
        orig = open(path, encoding="utf-8").read()
        t0 = time.time()
        try:
            open(path, "w", encoding="utf-8").write(orig.replace(m["find"], m["replace"], 1))
            rc, out = sh(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + m["targets"].split(), src, log)
            if rc != 0:
                verdict, caught = "BUILD FAILED", []
            else:
                rc, out = sh(["ctest", "-R", m["tests"], "--output-on-failure"], build, log)
                caught = failed_tests(out)
                verdict = "caught" if rc != 0 and caught else ("caught" if rc != 0 else "SURVIVED")
        finally:
            open(path, "w", encoding="utf-8").write(orig)
            # an unchanged file with a new time: the next build recompiles it once, as it must
        if verdict != "caught":
            survived += 1
        rows.append((m["name"], m["file"], verdict, ", ".join(caught) or "-", time.time() - t0))
        print(f"[{i + 1}/{len(mutants)}] {m['name']:30s} {verdict:9s} by {', '.join(caught) or '-'} ({time.time() - t0:.0f} s)", flush=True)

    # rebuild the restored tree so the scratch build is clean for the next run
    sh(["cmake", "--build", build, "-j", str(a.jobs), "--target"] + targets, src, log)
    print()
    print(f"| mutant | file | result | tests that caught it | s |")
    print(f"|---|---|---|---|---|")
    for name, f, v, c, dt in rows:
        print(f"| {name} | {f} | {v} | {c} | {dt:.0f} |")
    print()
    total = time.time() - t_start
    print(f"mutants: {len(rows) - survived} of {len(rows)} caught, {survived} not; {total / 60:.1f} min")
    print(f"{len(rows) - survived} passed, {survived} failed")
    sys.exit(1 if survived else 0)


if __name__ == "__main__":
    main()
