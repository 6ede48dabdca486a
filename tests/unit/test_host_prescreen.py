"""bench preflight's host prescreen (bench.measure.host_prescreen) over fake sysfs and procfs roots: each setting as
a tuned node has it, and as operators find it on the nodes that measure less."""

import resource

import pytest

from bench.measure import host_prescreen as H

UNLIMITED = {resource.RLIMIT_NOFILE: (1048576, 1048576), resource.RLIMIT_MEMLOCK: (resource.RLIM_INFINITY,) * 2}


def tree(root, files: dict[str, str]):
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


TUNED = {
    "sys/devices/system/cpu/cpu0/cpufreq/scaling_governor": "performance\n",
    "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "performance\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state0/name": "POLL\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state0/latency": "0\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state0/disable": "0\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state1/name": "C1\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state1/latency": "2\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state1/disable": "0\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state2/name": "C6\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state2/latency": "133\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state2/disable": "1\n",
    "sys/kernel/mm/transparent_hugepage/enabled": "always [madvise] never\n",
    "sys/class/iommu/dmar0/uevent": "\n",
    "sys/class/infiniband/mlx5_0/ports/1/state": "4: ACTIVE\n",
    "proc/sys/kernel/numa_balancing": "0\n",
    "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 iommu=pt quiet\n",
    "proc/swaps": "Filename\tType\tSize\tUsed\tPriority\n",
}
UNTUNED = {
    "sys/devices/system/cpu/cpu1/cpufreq/scaling_governor": "powersave\n",
    "sys/devices/system/cpu/cpu0/cpuidle/state2/disable": "0\n",
    "proc/sys/kernel/numa_balancing": "1\n",
    "proc/cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/sda1 quiet\n",
    "proc/swaps": "Filename\tType\tSize\tUsed\tPriority\n/swap.img\tfile\t8388604\t0\t-2\n",
}


def run(tmp_path, files, rlimits=UNLIMITED, environ=None):
    root = tree(tmp_path, files)
    found = H.findings(root / "sys", root / "proc", environ or {}, lambda r: rlimits[r])
    return {f.member: f for f in found if f.member not in ("gpu runtime", "docker", "enroot")}  # this host's: below


def test_a_tuned_node_passes_every_check_and_says_what_it_saw(tmp_path):
    found = run(tmp_path, TUNED)
    assert {m: f.status for m, f in found.items()} == {m: "ok" for m in (
        "cpu governor", "c-states", "numa balancing", "iommu", "huge pages", "swap", "open files", "locked memory")}
    assert found["cpu governor"].detail == "performance on 2 CPU(s)"
    assert "C6 (133 us, disabled)" in found["c-states"].detail
    assert found["iommu"].detail == "1 IOMMU unit(s) in passthrough (iommu=pt)"
    assert found["huge pages"].detail == "transparent huge pages: madvise"


def test_each_setting_that_measures_less_is_a_warning_with_what_to_do(tmp_path):
    rlimits = {resource.RLIMIT_NOFILE: (1024, 4096), resource.RLIMIT_MEMLOCK: (8 << 20, 8 << 20)}
    found = run(tmp_path, {**TUNED, **UNTUNED}, rlimits)
    assert {m: f.status for m, f in found.items() if f.status != "ok"} == {
        "cpu governor": "warning", "c-states": "warning", "numa balancing": "warning", "iommu": "warning",
        "swap": "warning", "open files": "warning", "locked memory": "error"}  # InfiniBand here: RDMA fails
    assert "performance on 1 CPU(s), powersave on 1 CPU(s)" in found["cpu governor"].detail
    assert "cpupower frequency-set -g performance" in found["cpu governor"].detail
    assert "deeper than 100 us: C6" in found["c-states"].detail
    assert "sysctl -w kernel.numa_balancing=0" in found["numa balancing"].detail
    assert "iommu=pt" in found["iommu"].detail and "8191 MiB" in found["swap"].detail
    assert "ulimit -n 1024" in found["open files"].detail
    assert "ulimit -l 8192 KiB on a node with InfiniBand" in found["locked memory"].detail


def test_locked_memory_matters_only_where_rdma_registers_it(tmp_path):
    files = {k: v for k, v in TUNED.items() if "infiniband" not in k}
    found = run(tmp_path, files, {**UNLIMITED, resource.RLIMIT_MEMLOCK: (8 << 20, 8 << 20)})
    assert found["locked memory"].status == "ok" and "no InfiniBand here" in found["locked memory"].detail


def test_a_host_without_the_settings_is_not_applicable_never_ok(tmp_path):
    found = run(tmp_path, {"proc/cmdline": "quiet\n"})
    assert {m: f.status for m, f in found.items() if f.status == "n/a"} == {
        "cpu governor": "n/a", "c-states": "n/a", "numa balancing": "n/a", "huge pages": "n/a", "swap": "n/a"}
    assert found["iommu"].status == "ok"  # no IOMMU unit: nothing translates


@pytest.mark.parametrize("environ", [{}, {"SLURM_JOB_ID": "7"}])
def test_srun_is_asked_only_inside_an_allocation(tmp_path, monkeypatch, environ):
    monkeypatch.setattr(H.shutil, "which", lambda name: None)  # no srun: nothing started, no finding
    assert "srun --mpi" not in run(tmp_path, TUNED, environ=environ)


def runtime(tmp_path, files, container=None, tools=(), loads=True):
    root = tree(tmp_path, {"dev/null": "", **files})
    found = H.gpu_runtime(container, root / "dev", root / "proc", root / "etc", root / "run",
                          which=lambda name: f"/usr/bin/{name}" if name in tools else None, loads=lambda name: loads)
    return [(f.member, f.status) for f in found], " ".join(f.detail for f in found)


def test_inside_a_container_the_runtimes_gpu_hook_gave_it_the_devices_and_the_drivers_libraries(tmp_path):
    gpu = {"dev/nvidia0": "", "dev/nvidia1": "", "proc/driver/nvidia/version": "NVRM 580.65.06\n"}
    assert runtime(tmp_path / "a", gpu, "docker")[0] == [("gpu runtime", "ok")]
    seen, line = runtime(tmp_path / "b", gpu, "docker", loads=False)  # devices, no libnvidia-ml: no hook ran
    assert seen == [("gpu runtime", "error")] and "2 GPU device(s) but not the driver's libnvidia-ml.so.1" in line
    seen, line = runtime(tmp_path / "c", {"proc/driver/nvidia/version": "x"}, "apptainer/singularity")
    assert seen == [("gpu runtime", "warning")] and "apptainer/singularity --nv" in line
    assert runtime(tmp_path / "d", {}, "docker")[0] == [("gpu runtime", "n/a")]


def test_on_a_gpu_host_each_container_runtime_has_its_gpu_hook(tmp_path):
    gpu = {"dev/nvidia0": ""}
    seen, line = runtime(tmp_path / "a", gpu, tools=("docker", "enroot"))
    assert seen == [("docker", "warning"), ("enroot", "warning")]
    assert "nvidia-ctk runtime configure" in line and "hooks.d/98-nvidia.sh" in line
    hooked = {**gpu, "etc/docker/daemon.json": '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}}',
              "etc/enroot/hooks.d/98-nvidia.sh": "#!/bin/sh\n"}
    assert runtime(tmp_path / "b", hooked, tools=("docker", "enroot"))[0] == [("docker", "ok"), ("enroot", "ok")]
    seen, line = runtime(tmp_path / "c", {**gpu, "run/cdi/nvidia.yaml": "cdiVersion: 0.5.0\n"}, tools=("docker",))
    assert seen == [("docker", "ok")] and "CDI (nvidia.yaml)" in line
    assert runtime(tmp_path / "d", {**gpu, "etc/docker/daemon.json": "not json"}, tools=("docker",))[0] == [
        ("docker", "warning")]
    assert runtime(tmp_path / "e", gpu)[0] == [("gpu runtime", "n/a")]  # no docker, no enroot
    assert runtime(tmp_path / "f", {}, tools=("docker",))[0] == [("gpu runtime", "n/a")]  # no GPU on the host
