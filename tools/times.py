#!/usr/bin/env python3
"""The test suite's times: each tier's wall time and test count, and the 20 slowest tests across tiers.

    python -m tools.times [FOLDER]      # default results/test-times, written by tools/run-tests.sh

Each tier leaves TIER.xml (JUnit, every test's time) and TIER.wall ("SECONDS EXIT-CODE") in FOLDER; `make test`
also leaves make-test.total (its own seconds, the venv's set-up included), venv.took ("SECONDS EXIT-CODE" of
`make venv`, its first step) and system-prepare.beside ("SECONDS EXIT-CODE" of the system tiers' set-up, which ran
beside the venv's and the first tiers).
"""

from __future__ import annotations

import argparse
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

# make test's order; multiproc-alone: the multiproc tests marked alone, run after the rest (tools/run-tests.sh)
ORDER = ["unit", "framework", "multiproc", "multiproc-alone", "slurm", "image", "kubernetes", "cluster", "diagnose",
         "image_cuda", "apptainer", "sif_pull", "gpu_check"]


def tiers(folder: Path) -> list[dict]:
    rows = []
    for wall in folder.glob("*.wall"):
        seconds, rc, *cached = wall.read_text().split()
        cases = []
        junit = wall.with_suffix(".xml")
        if junit.is_file():
            try:
                root = ET.parse(junit).getroot()
            except ET.ParseError:
                root = None
            for case in root.iter("testcase") if root is not None else ():
                outcome = ("skipped" if case.find("skipped") is not None else
                           "failed" if case.find("failure") is not None or case.find("error") is not None else
                           "passed")
                cases.append((float(case.get("time", 0)), f"{case.get('classname')}::{case.get('name')}", outcome))
        rows.append({"tier": wall.stem, "seconds": int(seconds), "rc": int(rc), "cases": cases, "cached": bool(cached)})
    return sorted(rows, key=lambda r: ORDER.index(r["tier"]) if r["tier"] in ORDER else len(ORDER))


def minutes(seconds: float) -> str:
    return f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("folder", nargs="?", type=Path, default=Path("results/test-times"))
    p.add_argument("--slowest", type=int, default=20)
    a = p.parse_args()
    rows = tiers(a.folder)
    if not rows:
        print(f"test-times: no tier times in {a.folder}", file=sys.stderr)
        sys.exit(1)
    print(f"{'tier':<16}{'wall':>9}{'passed':>8}{'failed':>8}{'skipped':>9}  exit")
    for r in rows:
        count = {k: sum(1 for c in r["cases"] if c[2] == k) for k in ("passed", "failed", "skipped")}
        if r["cached"]:
            print(f"{r['tier']:<16}{'-':>9}  passed before on the same inputs: not run (tools/tier_cache.py)")
            continue
        print(f"{r['tier']:<16}{minutes(r['seconds']):>9}{count['passed']:>8}{count['failed']:>8}"
              f"{count['skipped']:>9}  {r['rc']}")
    total = sum(r["seconds"] for r in rows)
    print(f"{'all tiers':<16}{minutes(total):>9}{sum(len(r['cases']) for r in rows):>8} tests")
    whole = a.folder / "make-test.total"
    if whole.is_file():  # written by `make test`: the tiers plus what ran between them
        seconds = int(whole.read_text().split()[0])
        print(f"{'make test':<16}{minutes(seconds):>9}  of which {minutes(max(seconds - total, 0))} outside the tiers' "
              "pytest runs (the venv, image builds and their self-tests, services, the tier cache)")
    venv = a.folder / "venv.took"
    if venv.is_file():
        seconds, rc = venv.read_text().split()[:2]
        print(f"{'venv':<16}{minutes(int(seconds)):>9}  its set-up, first (make venv, exit {rc})")
    beside = a.folder / "system-prepare.beside"
    if beside.is_file():
        seconds, rc = beside.read_text().split()[:2]
        print(f"{'system set-up':<16}{minutes(int(seconds)):>9}  beside the venv's and the first tiers "
              f"(make test-system-prepare, exit {rc}; its output: {a.folder / 'system-prepare.log'})")
    cases = sorted(((c[0], r["tier"], c[1]) for r in rows for c in r["cases"]), reverse=True)[:a.slowest]
    print(f"\nthe {len(cases)} slowest tests (s, tier, test):")
    for seconds, tier, name in cases:
        print(f"{seconds:8.1f}  {tier:<15} {name}")
    totals = {k: sum(1 for r in rows for c in r["cases"] if c[2] == k) for k in ("passed", "failed", "skipped")}
    print(f"\nall: {totals['passed']} passed, {totals['failed']} failed, {totals['skipped']} skipped")


if __name__ == "__main__":
    main()
