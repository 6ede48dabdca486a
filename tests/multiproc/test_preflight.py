"""bench preflight as a user runs it, and its cheap checks at the start of a run (issue 70)."""

import json

from tests.conftest import bench


def test_preflight_finds_a_missing_interface_and_says_so_in_json_and_in_its_exit_status():
    r = bench("preflight", "--no-frameworks", "--json", "--hosts", "127.0.0.1", NCCL_SOCKET_IFNAME="nonexistent0")
    assert r.returncode == 1, r.stderr
    found = {(f["check"], f["member"]): f for f in json.loads(r.stdout)}
    assert found[("network", "NCCL_SOCKET_IFNAME=nonexistent0")]["status"] == "error"
    assert "no interface whose name starts with nonexistent0" in found[("network", "NCCL_SOCKET_IFNAME=nonexistent0")][
        "detail"]
    assert found[("network", "127.0.0.1")]["detail"] == "reached through lo (127.0.0.1)"
    # this host's own kernel log, from the first source that answers here (as root: /dev/kmsg when journald keeps
    # no kernel messages); a fake one with an Xid the allow-list does not hold is an error with its exit status
    (log,) = [f for f in found.values() if f["check"] == "kernel-log"]
    assert log["status"] in ("ok", "n/a") and ("no Xid or SXid event in" in log["detail"] or "not readable" in
                                               log["detail"]), log
    ok = bench("preflight", "--no-frameworks")
    assert ok.returncode == 0 and "bench preflight on" in ok.stdout and "0 error(s)" in ok.stderr, ok.stderr


def test_a_run_prints_the_cheap_checks_findings_and_goes_on(tmp_path):
    out = tmp_path / "out"
    r = bench("torch-single", "--steps-per-window", "1", "--windows", "1", "--warmup-steps", "0", "--output",
              str(out), GLOO_SOCKET_IFNAME="nonexistent0")
    assert r.returncode == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("preflight:")]
    assert len(lines) == 1 and lines[0].startswith("preflight: error: GLOO_SOCKET_IFNAME=nonexistent0: no interface "
                                                   "named nonexistent0 here"), r.stderr
    assert len(list(out.glob("*.json"))) == 1


def test_preflight_reads_an_xid_from_the_kernel_log_as_an_error(tmp_path):
    (tmp_path / "kern.log").write_text("[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    r = bench("preflight", "--no-frameworks", "--json", "--node-patch", str(tmp_path / "labels"),
              HVDBENCH_KERNEL_LOG=str(tmp_path / "kern.log"), NODE_NAME="gpu-node-7")
    assert r.returncode == 1, r.stderr
    (log,) = [f for f in json.loads(r.stdout) if f["check"] == "kernel-log"]
    assert log["member"] == "PCI 0000:3b:00" and log["status"] == "error" and "fallen off the bus" in log["detail"]
    # the verdict as Kubernetes labels, the taint as the command that sets it (docs/soak.md)
    patch = json.loads((tmp_path / "labels" / "gpu-node-7-preflight.json").read_text())
    assert patch["metadata"]["labels"]["hvdbench.io/preflight"] == "error"
    assert "kernel-log PCI 0000:3b:00" in patch["metadata"]["annotations"]["hvdbench.io/preflight"]
    assert "kubectl taint node gpu-node-7 hvdbench.io/preflight=error:NoSchedule --overwrite" in r.stderr



def test_inside_an_allocation_srun_is_asked_whether_it_offers_pmix(tmp_path, monkeypatch):
    from bench.measure import host_prescreen

    srun = tmp_path / "srun"
    for offered, status in (("none\n  pmi2\n", "warning"), ("none\n  pmi2\n  pmix\n  pmix_v4\n", "ok")):
        srun.write_text(f"#!/bin/sh\n[ \"$1\" = --mpi=list ] && printf 'MPI plugin types are...\\n  {offered}'\n")
        srun.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
        (found,) = host_prescreen.srun_mpi({"SLURM_JOB_ID": "7"})
        assert found.status == status, found
        assert ("start them with mpirun" in found.detail) == (status == "warning")


def test_nagios_exit_codes_as_a_monitor_reads_them(tmp_path):
    """--exit-codes nagios: 2 for an error (an Xid in the kernel log), 1 for warnings only (an open-files limit
    below NCCL's needs), 3 for a diagnose that could not run; bench's own statuses stay 1 and 0 there."""
    import subprocess
    import sys

    from tests.conftest import ROOT, bench_env

    (tmp_path / "xid.log").write_text("[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    (tmp_path / "clean.log").write_text("[ 1.0] Linux version 6.1\n")

    def preflight(log: str, *args: str) -> int:
        line = f"ulimit -n 1024; exec {sys.executable} -m bench preflight --no-frameworks {' '.join(args)}"
        return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=300, cwd=ROOT,
                              env=bench_env(HVDBENCH_KERNEL_LOG=str(tmp_path / log))).returncode

    assert (preflight("xid.log", "--exit-codes", "nagios"), preflight("xid.log")) == (2, 1)
    assert (preflight("clean.log", "--exit-codes", "nagios"), preflight("clean.log")) == (1, 0)
    r = bench("diagnose", "--exit-codes", "nagios", "--output", str(tmp_path))  # no allocation, no hosts
    assert r.returncode == 3 and r.stderr.strip().startswith("error: bench diagnose runs inside a Slurm"), r.stderr


def test_a_threshold_pack_with_an_unknown_value_is_one_line_before_any_check(tmp_path):
    pack = tmp_path / "pack.toml"
    pack.write_text('[[pack]]\nname = "ours"\ngpus = ["NVIDIA H200"]\n[pack.values.ecc_max]\nvalue = 1\nsource = "s"\n')
    r = bench("preflight", "--no-frameworks", "--thresholds", str(pack))
    assert r.returncode == 1 and r.stdout == "", r.stdout
    assert r.stderr.strip().startswith(f"error: threshold pack {pack}, pack 1 (ours): unknown value ecc_max"), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
