#!/usr/bin/env python3
"""The part of bench/ that only the system tiers run: what their feature groups are keyed by.

    python -m tools.surface measure   # run the unit, framework and multiproc tiers under coverage.py (every Python
                                      # process they start, ranks included) and write COVERED
    python -m tools.surface show      # the code units no lower tier runs, by file, and the surface's digest

A code unit is a function or method (at any class depth; the functions nested in it are part of it), named
`path:Qual.name`, or a file's module-level code, named `path:<module>`. A unit is *covered* when the unit,
framework or multiproc tier ran at least one line of its body in the last measurement; COVERED lists those names,
one per line. Every change to bench/ reruns each system tier's smoke tests (a real run per environment, its result
checked in full); a tier's other tests, its feature tests, rerun only when the *surface* changed: the source of
every unit not in COVERED (a unit added or renamed since the measurement counts as not covered), and every file
under bench/ that is not Python. A unit's source is read as its syntax tree, so a comment or a blank line changes
nothing. The surface is a superset of what each feature group runs that no lower tier runs (no coverage is taken
inside the containers), so it may rerun a group that did not need it, never skip one that did.

Measure again after taking tests out of the lower tiers (a unit they no longer run would stay listed as covered);
adding code or tests needs nothing: new units count as not covered until then.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COVERED = ROOT / "tools" / "lower-covered.txt"
MODULE = "<module>"
# The tiers measured: each runs every time the gate runs (they are not cached), so what they run is proven anyway.
LOWER = ["test-unit", "test-framework", "test-multiproc"]
# Started in every Python process of the venv while COVERAGE_PROCESS_START is set (coverage.py's subprocess
# support), and only then: the line is inert otherwise, and it is removed after the measurement.
PTH_NAME = "hvdbench-coverage.pth"
PTH_LINE = "import os; os.environ.get('COVERAGE_PROCESS_START') and __import__('coverage').process_startup()\n"


def bench_files() -> list[str]:
    """Every file under bench/ that git knows or would add."""
    done = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "bench"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return sorted(name for name in done.stdout.split("\0") if name and (ROOT / name).is_file())


def units(path: str, source: str) -> dict[str, tuple[ast.AST, range | list[int]]]:
    """{name: (node, the lines of its body)} for every code unit of one Python file; the module unit's node is
    the module with every unit's body taken out, its lines those outside any unit."""
    tree = ast.parse(source, filename=path)
    found: dict[str, tuple[ast.AST, range | list[int]]] = {}
    in_units: set[int] = set()

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                # from the line after the `def` (which runs at import): a one-line function is never covered
                lines = range(max(node.body[0].lineno, node.lineno + 1), node.end_lineno + 1)
                found[f"{path}:{prefix}{node.name}"] = (node, lines)
                in_units.update(lines)
            elif isinstance(node, ast.ClassDef):
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    module = ast.parse(source, filename=path)
    for node in ast.walk(module):  # the module unit: its statements with the units' bodies emptied
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.body = [ast.Pass()]
    outside = range(1, len(source.splitlines()) + 1)
    found[f"{path}:{MODULE}"] = (module, [n for n in outside if n not in in_units])
    return found


def covered(root: Path = ROOT) -> set[str]:
    """The unit names of the last measurement (empty when there is none: then the whole of bench/ is surface)."""
    try:
        text = (root / COVERED.relative_to(ROOT)).read_text()
    except OSError:
        return set()
    return {line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")}


def surface(root: Path = ROOT, files: list[str] | None = None) -> tuple[str, list[str]]:
    """(the digest of the surface of ``files`` under ``root`` (default every file under bench/), the names in it)."""
    known = covered(root)
    h = hashlib.sha256()
    names = []
    for path in bench_files() if files is None else files:
        data = (root / path).read_bytes()
        if not path.endswith(".py"):
            h.update(path.encode() + b"\0" + data)
            names.append(path)
            continue
        for name, (node, _) in sorted(units(path, data.decode()).items()):
            if name not in known:
                h.update(name.encode() + b"\0" + ast.dump(node, include_attributes=False).encode())
                names.append(name)
    return h.hexdigest(), names


def ran_lines(data_file: Path) -> dict[str, set[int]]:
    """{path under ROOT: the lines coverage.py saw run} from a combined data file."""
    import coverage

    data = coverage.CoverageData(basename=str(data_file))
    data.read()
    lines: dict[str, set[int]] = {}
    for measured in data.measured_files():
        try:
            path = str(Path(measured).resolve().relative_to(ROOT))
        except ValueError:
            continue
        lines.setdefault(path, set()).update(data.lines(measured) or [])
    return lines


def covered_units(lines: dict[str, set[int]], root: Path = ROOT, files: list[str] | None = None) -> list[str]:
    """The units of ``files`` (default every Python file under bench/) of which at least one line of the body
    ran, given {path: the lines that ran}."""
    names = []
    for path in bench_files() if files is None else files:
        if not path.endswith(".py"):
            continue
        ran = lines.get(path, set())
        for name, (_, body) in units(path, (root / path).read_text()).items():
            if ran.intersection(body):
                names.append(name)
    return sorted(names)


def site_packages() -> Path:
    venv = Path(os.environ.get("VENV", ROOT / ".venv"))
    found = sorted((venv if venv.is_absolute() else ROOT / venv).glob("lib/python*/site-packages"))
    if not found:
        raise SystemExit("surface: no venv (run make venv first)")
    return found[0]


def measure() -> None:
    """Run the lower tiers with coverage.py in every Python process, then write COVERED. A tier's failing test
    does not stop the measurement (what ran is still what ran); it is named at the end."""
    try:
        import coverage
    except ImportError:
        raise SystemExit("surface: coverage.py is not in this Python (run make venv, then .venv/bin/python -m "
                         "tools.surface measure)") from None
    work = Path(tempfile.mkdtemp(prefix="hvdbench-surface-"))
    rc = work / "coveragerc"
    rc.write_text(f"[run]\nparallel = true\nsource = {ROOT / 'bench'}\ndata_file = {work / 'cov'}\n"
                  "disable_warnings = no-data-collected, module-not-measured\n")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))  # SIGTERM also runs the finally
    pth = site_packages() / PTH_NAME
    pth.write_text(PTH_LINE)
    failed = []
    try:
        env = dict(os.environ, COVERAGE_PROCESS_START=str(rc), HVDBENCH_TEST_TIMES=str(work / "times"))
        for target in LOWER:
            if subprocess.run(["make", "--no-print-directory", target], cwd=ROOT, env=env).returncode != 0:
                failed.append(target)
        combined = coverage.Coverage(data_file=str(work / "cov"), config_file=str(rc))
        combined.combine([str(work)], keep=False)
        combined.save()
        names = covered_units(ran_lines(work / "cov"))
    finally:  # however it ends (a failure, Ctrl-C), no process of the venv starts coverage again, nothing is left
        pth.unlink(missing_ok=True)
        shutil.rmtree(work, ignore_errors=True)
    every = sum(len(units(p, (ROOT / p).read_text())) for p in bench_files() if p.endswith(".py"))
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    COVERED.write_text(f"# bench/'s code units the unit, framework and multiproc tiers ran: {len(names)} of "
                       f"{every}, measured at {head.stdout.strip()} (python -m tools.surface measure)\n"
                       + "".join(f"{name}\n" for name in names))
    print(f"surface: {len(names)} of {every} units covered by the lower tiers; written to "
          f"{COVERED.relative_to(ROOT)}" + (f" (failed: {', '.join(failed)})" if failed else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", choices=("measure", "show"))
    a = p.parse_args()
    if a.command == "measure":
        measure()
        return
    digest, names = surface()
    by_file: dict[str, list[str]] = {}
    for name in names:
        path, _, unit = name.partition(":")
        by_file.setdefault(path, []).append(unit or "(the file)")
    for path, found in by_file.items():
        print(f"{path}: {', '.join(found)}")
    print(f"surface: {len(names)} units not covered by the lower tiers; digest {digest[:12]}")


if __name__ == "__main__":
    sys.exit(main())
