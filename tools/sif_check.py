"""Check a SIF the way a cluster user takes it: its size, bench in it, each framework environment's CUDA, NCCL and
Horovod build, a 2-rank CPU run of one mode per framework environment, and `--nv` accepted.

    python -m tools.sif_check hvdbench-current-cuda.sif          # make sif-check FLAVOR=cuda (after make sif)
    python -m tools.sif_check SIF --modes torch-ddp --json checks.json

Each check is one row (what ran, passed or why not, seconds) and the exit code is 1 when any failed. It needs no
GPU: the runs take --device cpu, and `--nv` on a host without a driver is a warning of the runtime's, not an error
(on a GPU node the same command shows the runtime finding the driver). The flavour is read from the SIF's labels:
in a CUDA SIF every framework process must load one NCCL and one CUDA runtime, from its own environment, and its
Horovod must have NCCL, MPI and Gloo built; in a CPU SIF, MPI and Gloo.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tools import sif

RUN = ["--device", "cpu", "--np", "2", "--model", "resnet50", "--image-size", "32", "--batch-size", "2",
       "--warmup-steps", "1", "--steps-per-window", "2", "--windows", "2", "--no-telemetry"]


def env_problems(record: dict[str, Any], flavor: str) -> list[str]:
    """What `bench env --check --json` shows wrong for a SIF of ``flavor`` (cuda or cpu); empty when nothing."""
    problems = []
    parts = record.get("environments") or {}
    if set(parts) != {"torch", "tensorflow"}:
        problems.append(f"framework environments {sorted(parts)}, not torch and tensorflow")
    for name, part in sorted(parts.items()):
        horovod = part.get("horovod") or {}
        built = ["mpi", "gloo", *(["nccl"] if flavor == "cuda" else [])]
        missing = [b for b in built if not horovod.get(f"{b}_built")]
        if missing:
            why = f" ({horovod['error']})" if "error" in horovod else ""
            problems.append(f"{name}: Horovod without {', '.join(missing)}{why}")
        if flavor != "cuda":
            continue
        if not (record.get(name) or {}).get("cuda"):
            problems.append(f"{name}: not a CUDA build")
        for lib in ("nccl", "cudart"):
            found = (part.get("loaded_libraries") or {}).get(lib) or []
            if len(found) != 1 or not found[0].startswith(part.get("prefix", "?") + "/"):
                problems.append(f"{name}: loads {lib} from {found or 'nowhere'}, not once from {part.get('prefix')}")
    return problems


def run(argv: list[str], timeout: int = 900) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "", f"ran past {timeout} s", time.monotonic() - t0
    return done.returncode, done.stdout, done.stderr, time.monotonic() - t0


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][-300:] if lines else ""


def check(path: Path, modes: list[str]) -> dict[str, Any]:
    """Every check of the SIF at ``path``: {sif, bytes, flavor, runtime, checks: [{check, passed, seconds, detail}]}."""
    runtime = sif.runtime()
    rows: list[dict[str, Any]] = []

    def row(name: str, passed: bool, seconds: float, detail: str) -> bool:
        rows.append({"check": name, "passed": passed, "seconds": round(seconds, 1), "detail": detail})
        return passed

    code, out, err, took = run([runtime, "inspect", "--json", "--labels", str(path)])
    labels = {}
    if code == 0:
        data = json.loads(out)
        labels = data.get("data", {}).get("attributes", {}).get("labels", data)
    flavor = labels.get("io.hvdbench.flavor", "unknown")
    row("labels", code == 0 and flavor in ("cuda", "cpu"), took, f"flavor {flavor}" if code == 0 else last_line(err))
    code, out, err, took = run([runtime, "exec", str(path), "bench", "--version"])
    row("bench --version", code == 0, took, out.strip() if code == 0 else last_line(err))
    code, out, err, took = run([runtime, "exec", str(path), "bench", "env", "--check", "--json"])
    if code == 0:
        problems = env_problems(json.loads(out), flavor)
        fine = ("one NCCL and one CUDA runtime per framework, its own; Horovod with NCCL, MPI, Gloo"
                if flavor == "cuda" else "Horovod with MPI, Gloo")
        row("bench env --check", not problems, took, "; ".join(problems) or fine)
    else:
        row("bench env --check", False, took, last_line(err))
    with tempfile.TemporaryDirectory(prefix="hvdbench-sif-check-") as tmp:
        for mode in modes:
            out_dir = Path(tmp) / mode
            code, out, err, took = run([runtime, "exec", "--bind", tmp, str(path), "bench", mode, *RUN, "--output",
                                        str(out_dir)])
            results = sorted(out_dir.glob("*.json")) if out_dir.is_dir() else []
            if code == 0 and len(results) == 1:
                result = json.loads(results[0].read_text())
                rate = result["summary"]["samples_per_sec_total"]
                row(f"{mode} --np 2 (cpu)", result["world_size"] == 2, took, f"{rate:.1f} samples/s, a result")
            else:
                row(f"{mode} --np 2 (cpu)", False, took, last_line(err) or f"exit {code}, {len(results)} results")
    code, out, err, took = run([runtime, "exec", "--nv", str(path), "bench", "--version"])
    warned = [line for line in err.splitlines() if "nv" in line.lower()]
    row("exec --nv", code == 0, took, (last_line("\n".join(warned)) or "accepted") if code == 0 else last_line(err))
    return {"sif": str(path), "bytes": path.stat().st_size, "flavor": flavor, "runtime": runtime, "checks": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sif", type=Path)
    parser.add_argument("--modes", default="torch-ddp,tf-horovod", help="one mode per framework environment")
    parser.add_argument("--json", type=Path, help="also write the checks here")
    a = parser.parse_args()
    path = a.sif.resolve()
    if not path.is_file():
        sys.exit(f"sif_check: error: no SIF at {a.sif} (make sif STACK=... FLAVOR=... builds one)")
    try:
        report = check(path, [m for m in a.modes.split(",") if m])
    except sif.SifError as exc:
        sys.exit(f"sif_check: error: {exc}")
    print(f"{report['sif']}: {report['bytes'] / 2**30:.2f} GiB, flavor {report['flavor']}, {report['runtime']}")
    width = max(len(r["check"]) for r in report["checks"])
    for r in report["checks"]:
        print(f"  {r['check']:<{width}}  {'ok  ' if r['passed'] else 'FAIL'}  {r['seconds']:6.1f} s  {r['detail']}")
    if a.json:
        a.json.write_text(json.dumps(report, indent=2) + "\n")
    failed = [r["check"] for r in report["checks"] if not r["passed"]]
    if failed:
        sys.exit(f"sif_check: {len(failed)} check(s) failed: {', '.join(failed)}")


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
