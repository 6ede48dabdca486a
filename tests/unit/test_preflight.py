"""bench preflight's checks (bench.measure.env_faults) on a fake NVML and a fake sysfs: each fault found, in one
line with what to do, and nothing found on a healthy machine."""

import re
from types import SimpleNamespace

import pytest

from bench.measure import env_faults
from bench.measure.env_faults import Finding


class Nvml:
    """pynvml's calls the checks make, over a list of GPUs (dicts); a missing figure raises NotSupported."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 (NVML's name)
        pass

    def __init__(self, gpus: list[dict]) -> None:
        self.gpus = gpus

    def _get(self, h, key):
        if key not in self.gpus[h]:
            raise self.NVMLError_NotSupported()
        return self.gpus[h][key]

    def nvmlDeviceGetCount(self):  # noqa: N802 (NVML's names)
        return len(self.gpus)

    class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
        pass

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        if self.gpus[i].get("lost"):
            raise self.NVMLError_GpuIsLost()
        return i

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return self.gpus[h].get("name", "NVIDIA H200")

    def nvmlDeviceGetComputeRunningProcesses(self, h):  # noqa: N802
        return [SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in self._get(h, "pids")]

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):  # noqa: N802
        assert counter == 0  # since the driver loaded
        return self._get(h, "ecc" if kind == 1 else "ecc_corrected")

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):  # noqa: N802
        return self._get(h, "pending")

    def nvmlDeviceGetRemappedRows(self, h):  # noqa: N802
        return self._get(h, "rows")


HEALTHY = {"pids": [], "ecc": 0, "pending": 0, "rows": (0, 0, 0, 0)}


def bad(found: list[Finding]) -> list[tuple[str, str]]:
    return [(f.member, f.status) for f in found if f.status in ("error", "warning")]


def test_a_healthy_gpu_is_ok_and_each_fault_is_named_with_what_to_do():
    gpus = [HEALTHY, {**HEALTHY, "pids": [4242]}, {**HEALTHY, "ecc": 3}, {**HEALTHY, "pending": 1},
            {**HEALTHY, "rows": (0, 0, 1, 0)}, {**HEALTHY, "rows": (0, 0, 0, 1)}, {**HEALTHY, "rows": (2, 1, 0, 0)},
            {"pids": []}]  # the last reports no ECC, retirement or remap figures (a consumer GPU)
    found = env_faults.gpu_findings(Nvml(gpus))
    assert bad(found) == [("gpu 1 (NVIDIA H200)", "warning"), ("gpu 2 (NVIDIA H200)", "error"),
                          ("gpu 3 (NVIDIA H200)", "error"), ("gpu 4 (NVIDIA H200)", "error"),
                          ("gpu 5 (NVIDIA H200)", "error"), ("gpu 6 (NVIDIA H200)", "warning")]
    text = {f.member: f.detail for f in found}
    assert "pid 4242" in text["gpu 1 (NVIDIA H200)"] and "CUDA_VISIBLE_DEVICES" in text["gpu 1 (NVIDIA H200)"]
    assert "3 uncorrected ECC" in text["gpu 2 (NVIDIA H200)"] and "nvidia-smi -r" in text["gpu 3 (NVIDIA H200)"]
    assert "row remap waits" in text["gpu 4 (NVIDIA H200)"] and "failed" in text["gpu 5 (NVIDIA H200)"]
    assert [f.status for f in found if f.member.startswith(("gpu 0", "gpu 7"))] == ["ok", "ok"]
    assert "ECC not reported: NotSupported" in text["gpu 7 (NVIDIA H200)"]
    # at the start of a run under another launcher, the ranks' own processes are not held against the GPU
    assert bad(env_faults.gpu_findings(Nvml(gpus[:2]), processes=False)) == []


def test_a_gpu_whose_handle_nvml_refuses_is_an_error_and_the_others_are_still_checked():
    """NVML refuses the handle of a GPU fallen off the bus: that is the finding (error, with what to do), never an
    internal error that stops preflight, or a run's start on a node whose other GPUs are healthy."""
    found = env_faults.gpu_findings(Nvml([HEALTHY, {"lost": True}, {**HEALTHY, "ecc": 1}]))
    assert bad(found) == [("gpu 1", "error"), ("gpu 2 (NVIDIA H200)", "error")]
    lost = next(f for f in found if f.member == "gpu 1")
    assert "GpuIsLost" in lost.detail and "reset" in lost.detail
    assert [f.status for f in found if f.member.startswith("gpu 0")] == ["ok"]


def test_the_driver_against_each_frameworks_cuda():
    found = env_faults.driver_findings("575.57.08", 12090, {"PyTorch": "13.0", "TensorFlow": "12.5.1", "cpu": None})
    assert [(f.member, f.status) for f in found] == [("PyTorch", "error"), ("TensorFlow", "ok"), ("cpu", "n/a")]
    assert "580.65.06 or newer" in found[0].detail and "CUDA 12.9 at most" in found[0].detail
    assert env_faults.driver_findings("580.65.06", 13000, {"PyTorch": "13.0"})[0].status == "ok"
    assert env_faults.driver_findings(None, None, {"PyTorch": "13.0"})[0].status == "n/a"


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    """A fake /sys: eth0 up, ib0 down, lo (no link state, as the real one), and InfiniBand ports."""
    for name, state in (("eth0", "up"), ("ib0", "down"), ("lo", "unknown")):
        (tmp_path / "class" / "net" / name).mkdir(parents=True)
        (tmp_path / "class" / "net" / name / "operstate").write_text(state + "\n")
    for port, state, rate in (("mlx5_0/ports/1", "4: ACTIVE", "200 Gb/sec (4X HDR)"),
                              ("mlx5_1/ports/1", "4: ACTIVE", "100 Gb/sec (4X EDR)"),
                              ("mlx5_2/ports/1", "1: DOWN", "10 Gb/sec (4X SDR)")):
        (tmp_path / "class" / "infiniband" / port).mkdir(parents=True)
        (tmp_path / "class" / "infiniband" / port / "state").write_text(state + "\n")
        (tmp_path / "class" / "infiniband" / port / "rate").write_text(rate + "\n")
    monkeypatch.setattr(env_faults, "SYSFS", tmp_path)
    return tmp_path


def test_the_interfaces_named_for_nccl_and_gloo_exist_and_are_up(sysfs):
    found = env_faults.network_findings({"NCCL_SOCKET_IFNAME": "eth,ib0", "GLOO_SOCKET_IFNAME": "eth"}, [])
    assert [(f.member, f.status) for f in found] == [("NCCL_SOCKET_IFNAME=eth", "ok"),  # NCCL's: a prefix
                                                     ("NCCL_SOCKET_IFNAME=ib0", "error"),
                                                     ("GLOO_SOCKET_IFNAME=eth", "error")]  # Gloo's: a name
    assert found[0].detail == "eth0 is up" and found[1].detail.startswith("ib0 is down")
    assert "no interface named eth here (these are: eth0, ib0, lo)" in found[2].detail
    found = env_faults.network_findings({"NCCL_SOCKET_IFNAME": "=eth", "GLOO_SOCKET_IFNAME": "lo"}, [])
    assert [f.status for f in found] == ["error", "ok"] and "named eth" in found[0].detail  # '=': exact
    assert "no link state" in found[1].detail
    assert env_faults.network_findings({"NCCL_SOCKET_IFNAME": "^docker,lo"}, []) == []  # exclusions name none


def test_a_host_is_reached_through_the_named_interface_or_named(sysfs):
    """The route to a host is the kernel's (nothing is sent): 127.0.0.1 goes through lo. A host whose name routes
    through another interface than NCCL_SOCKET_IFNAME's is no fault (host names on the management network, NCCL on
    the fabric: NCCL exchanges the named interface's addresses); one that does not resolve is."""
    assert bad(env_faults.network_findings({"GLOO_SOCKET_IFNAME": "lo"}, ["127.0.0.1"])) == []
    found = env_faults.network_findings({"NCCL_SOCKET_IFNAME": "eth0"}, ["127.0.0.1", "no-such-host.invalid"])
    assert bad(found) == [("no-such-host.invalid", "error")]
    assert found[1].status == "ok" and "reached through lo (127.0.0.1), by its name" in found[1].detail
    assert "the ranks' traffic goes through eth0 (NCCL_SOCKET_IFNAME)" in found[1].detail
    assert "does not resolve" in found[2].detail


def test_infiniband_ports_down_or_slow(sysfs):
    found = env_faults.infiniband_findings({})
    assert [(f.member, f.status) for f in found] == [("mlx5_0:1", "ok"), ("mlx5_1:1", "warning"),
                                                     ("mlx5_2:1", "warning")]
    assert "below the fastest port's 200 Gb/sec" in found[1].detail and "1: DOWN" in found[2].detail
    # a port NCCL is told to use that is down is an error; excluded, a warning
    assert bad(env_faults.infiniband_findings({"NCCL_IB_HCA": "mlx5_2:1"}))[-1] == ("mlx5_2:1", "error")
    assert bad(env_faults.infiniband_findings({"NCCL_IB_HCA": "^mlx5_2"}))[-1] == ("mlx5_2:1", "warning")


@pytest.mark.parametrize("value, status", [
    ("mlx5", "error"),  # NCCL's names are prefixes: every mlx5 card, the down one too
    ("=mlx5", "warning"),  # '=': exact names, and no card is named mlx5
    ("mlx5_2:1", "error"), ("=mlx5_2:1", "error"),  # that card's port 1
    ("mlx5_2:2", "warning"),  # port 2 alone: the down port 1 is not used
    ("mlx5_0,mlx5_1", "warning"),
    ("^mlx5_2", "warning"), ("^mlx5_1", "error"),  # '^': the cards not to use; the rest are used
    ("^=mlx5", "error"),  # exact names excluded: none is named mlx5, so every card is used
    ("^mlx5", "warning"),
])
def test_nccl_ib_hca_is_read_as_nccl_reads_it(sysfs, value, status):
    """A down port is an error where NCCL_IB_HCA makes NCCL use it (prefixes by default, '=' exact, ':port', '^'
    to exclude), a warning where it does not."""
    found = env_faults.infiniband_findings({"NCCL_IB_HCA": value})
    assert bad(found)[-1] == ("mlx5_2:1", status), found


def test_the_environment_record_keeps_a_gpu_nvml_cannot_reach_and_goes_on(monkeypatch):
    """Every result records NVML's GPUs: one whose handle NVML refuses is listed as unavailable, with why, and the
    record of the others is whole (a run on the healthy GPUs of such a node keeps its environment)."""
    from bench.records import env

    class Fake(Nvml):
        def nvmlShutdown(self):  # noqa: N802
            pass

        def nvmlSystemGetDriverVersion(self):  # noqa: N802
            return b"580.65.06"

        def _unsupported(self, *args):
            raise self.NVMLError_NotSupported()

        nvmlSystemGetCudaDriverVersion = nvmlDeviceGetMemoryInfo = nvmlDeviceGetCudaComputeCapability = _unsupported
        nvmlDeviceGetEccMode = nvmlDeviceGetPowerManagementLimit = nvmlDeviceGetUUID = _unsupported

    monkeypatch.setattr(env, "load_nvml", lambda: (Fake([HEALTHY, {"lost": True}, HEALTHY]), None))
    record = env.nvml_gpus()
    assert record["available"] and record["driver"] == "580.65.06"
    assert [g["index"] for g in record["gpus"]] == [0, 1, 2]
    assert record["gpus"][1] == {"index": 1, "unavailable": "GpuIsLost"}
    assert record["gpus"][2]["name"] == "NVIDIA H200"


class Counters(Nvml):
    """And ECC counters by location (nvmlDeviceGetMemoryErrorCounter): a GPU's ``counters`` maps
    (error type, counter, location) to a count; one not there is NotSupported. Pages retired by cause (a GPU's
    ``retired``: cause -> pages), and each GPU's VBIOS."""
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_AGGREGATE_ECC = 1
    NVML_MEMORY_LOCATION_DRAM, NVML_MEMORY_LOCATION_SRAM = 2, 7
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS, NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 0, 1

    def nvmlDeviceGetRetiredPages(self, h, cause):  # noqa: N802
        return self._get(h, "retired")[cause]

    def nvmlDeviceGetVbiosVersion(self, h):  # noqa: N802
        return self._get(h, "vbios")

    def nvmlDeviceGetMemoryErrorCounter(self, h, kind, counter, location):  # noqa: N802
        counts = self.gpus[h].get("counters", {})
        if (kind, counter, location) not in counts:
            raise self.NVMLError_NotSupported()
        return counts[(kind, counter, location)]


def test_a_gpus_ecc_counts_and_remapped_rows_are_held_to_its_models_published_limits(tmp_path):
    """Azure's ND H100/H200 v5 limits (bench/measure/thresholds.py): SRAM correctable above 10000, DRAM above
    20000000, rows remapped for uncorrectable errors above 512: errors, each naming the limit and its source."""
    from bench.measure import thresholds

    packs = thresholds.load()
    gpus = [{**HEALTHY, "counters": {(0, 1, 7): 10000, (0, 0, 2): 5}},  # at the limit: ok
            {**HEALTHY, "counters": {(0, 1, 7): 10001}},
            {**HEALTHY, "counters": {(1, 1, 2): 20000001}},
            {**HEALTHY, "rows": (0, 513, 0, 0)},
            {**HEALTHY, "rows": (0, 3, 0, 0)},
            {**HEALTHY, "name": "NVIDIA A100-SXM4-80GB", "counters": {(0, 1, 7): 99999}}]  # no pack: not held
    found = env_faults.gpu_findings(Counters(gpus), packs=packs)
    assert bad(found) == [("gpu 1 (NVIDIA H200)", "error"), ("gpu 2 (NVIDIA H200)", "error"),
                          ("gpu 3 (NVIDIA H200)", "error"), ("gpu 4 (NVIDIA H200)", "warning")]
    text = {f.member: f.detail for f in found if f.status == "error"}
    assert text["gpu 1 (NVIDIA H200)"].startswith("SRAM ECC errors corrected aggregate 10001 over the 10000 allowed "
                                                  "(Azure ND H200 v5 health checks: Azure/azurehpc-health-checks@")
    assert "DRAM ECC errors uncorrected aggregate 20000001 over the 20000000 allowed" in text["gpu 2 (NVIDIA H200)"]
    assert "513 row(s) remapped" in text["gpu 3 (NVIDIA H200)"] and "512 allowed" in text["gpu 3 (NVIDIA H200)"]
    # without packs the same GPUs are judged as before: a remapped row is a warning, counters unread
    assert bad(env_faults.gpu_findings(Counters(gpus))) == [("gpu 3 (NVIDIA H200)", "warning"),
                                                            ("gpu 4 (NVIDIA H200)", "warning")]
    # a user's pack over the shipped one, value by value, and for a model no shipped pack has
    own = tmp_path / "ours.toml"
    own.write_text('[[pack]]\nname = "ours"\ngpus = ["NVIDIA H200", "NVIDIA A100-SXM4-80GB"]\n'
                   '[pack.values.ecc_sram_correctable_max]\nvalue = 20000\nsource = "our runbook, 2026-11"\n')
    mine = thresholds.load(own)
    assert mine.get("NVIDIA H200", "ecc_sram_correctable_max").value == 20000
    assert mine.get("NVIDIA H200", "ecc_dram_max").pack == "Azure ND H200 v5 health checks"
    found = env_faults.gpu_findings(Counters(gpus), packs=mine)
    assert [m for m, s in bad(found) if s == "error"] == ["gpu 2 (NVIDIA H200)", "gpu 3 (NVIDIA H200)",
                                                          "gpu 5 (NVIDIA A100-SXM4-80GB)"]


@pytest.mark.parametrize("text, line", [
    ('[[pack]]\nname = "x"\ngpus = ["G"]\ncolour = 1\n', "unknown field colour"),
    ('[[pack]]\nname = "x"\ngpus = ["G"]\n[pack.values.ecc_max]\nvalue = 1\nsource = "s"\n', "unknown value ecc_max"),
    ('[[pack]]\nname = "x"\ngpus = ["G"]\n[pack.values.ecc_dram_max]\nvalue = 1\n', "needs exactly a value"),
    ('[[pack]]\nname = "x"\ngpus = ["G"]\n[pack.values.ecc_dram_max]\nvalue = 1\nsource = " "\n', "has no source"),
    ('[[pack]]\nname = "x"\ngpus = "G"\n', "needs a name and gpus"),
    ("[pack]\n", "one or more [[pack]] tables"),
    ("not toml [", "not TOML"),
])
def test_a_bad_threshold_pack_is_one_line(tmp_path, text, line):
    from bench.errors import BenchError
    from bench.measure import thresholds

    path = tmp_path / "pack.toml"
    path.write_text(text)
    with pytest.raises(BenchError, match=re.escape(line)):
        thresholds.load(path)
    with pytest.raises(BenchError, match="cannot read the threshold pack"):
        thresholds.load(tmp_path / "none.toml")


def test_meta_gcms_defaults_hold_every_model_and_the_vbios_must_match_across_a_model():
    """Meta's GCM (bench/measure/thresholds.py): more than 50000000 corrected ECC errors since the driver loaded,
    or more than 10 pages retired for one cause, fail a GPU of any model; GPUs of one model flashed with different
    VBIOS versions fail the node."""
    from bench.measure import thresholds

    packs = thresholds.load()
    gpus = [{**HEALTHY, "name": "Tesla V100-SXM2-32GB", "ecc_corrected": 50000001, "vbios": "88.00.43.00.01"},
            {**HEALTHY, "name": "Tesla V100-SXM2-32GB", "retired": {0: [1] * 10, 1: [2] * 11},
             "vbios": "88.00.80.00.01"},
            {**HEALTHY, "ecc_corrected": 50000000, "retired": {0: [1] * 10, 1: []}, "vbios": "96.00.74.00.01"},
            {**HEALTHY, "vbios": "96.00.74.00.01"}]  # two H200s alike: no finding
    found = env_faults.gpu_findings(Counters(gpus), packs=packs)
    assert bad(found) == [("gpu 0 (Tesla V100-SXM2-32GB)", "error"), ("gpu 1 (Tesla V100-SXM2-32GB)", "error"),
                          ("node (Tesla V100-SXM2-32GB)", "error")]
    text = [f.detail for f in found if f.status == "error"]
    assert text[0].startswith("50000001 corrected ECC errors since the driver loaded, over the 50000000 allowed "
                              "(Meta GCM health-check defaults: facebookresearch/gcm@ccc9129")
    assert text[1].startswith("11 pages retired for double-bit ECC errors, over the 10 allowed")
    assert "gpu 0 88.00.43.00.01, gpu 1 88.00.80.00.01" in text[2]
    # a model's own pack wins over the one for every model
    mine = thresholds.Packs()
    mine.add("all", ["*"], {"retired_pages_max": (0, "s")})
    mine.add("v100s", ["Tesla V100-SXM2-32GB"], {"retired_pages_max": (100, "t")})
    assert mine.get("Tesla V100-SXM2-32GB", "retired_pages_max").value == 100
    assert mine.get("NVIDIA H200", "retired_pages_max").value == 0
