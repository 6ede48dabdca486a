"""bench preflight's kernel-log check (bench.measure.kernel_log) over a fake kernel log: each Xid and SXid line of
the kinds operators meet, mapped to the GPU NVML names at its PCI address, the allow-list, and a log that cannot be
read."""

from types import SimpleNamespace

import pytest

from bench.measure import kernel_log as K

LOG = """\
[    5.123] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)
[  812.044] NVRM: Xid (PCI:0000:3b:00): 13, pid=4242, name=python, Graphics Exception: ESR 0x404490=0x80000001
[  900.000] eth0: link up
[ 1201.517] NVRM: Xid (PCI:0000:3B:00): 79, pid=4242, name=python, GPU has fallen off the bus.
[ 1201.518] NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python, GPU has fallen off the bus.
[ 1300.001] NVRM: Xid (PCI:0000:86:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error
[ 1400.002] NVRM: Xid (PCI:0000:99:00): 999, pid=1, name=x, a code not in the table
[ 1500.003] nvidia-nvswitch2: SXid (PCI:0000:c8:00.0): 20034, Fatal, Link 30 LTSSM Fault Up
"""


class Nvml:
    """NVML with two GPUs at the log's first two addresses (its third GPU's handle is refused)."""
    class NVMLError(Exception):
        pass

    def nvmlDeviceGetCount(self):  # noqa: N802 (NVML's names)
        return 3

    def nvmlDeviceGetHandleByIndex(self, i):  # noqa: N802
        if i == 2:
            raise self.NVMLError("GpuIsLost")
        return i

    def nvmlDeviceGetPciInfo(self, h):  # noqa: N802
        return SimpleNamespace(busId=[b"00000000:3B:00.0", "00000000:86:00.0"][h])

    def nvmlDeviceGetName(self, h):  # noqa: N802
        return "NVIDIA H100 80GB HBM3"


def by_member(found):
    return {(f.member, f.detail.split(" x")[0]): f for f in found}


def test_each_event_is_named_by_its_gpu_with_its_meaning_and_what_to_do(tmp_path, monkeypatch):
    (tmp_path / "kern.log").write_text(LOG)
    monkeypatch.setenv(K.LOG_ENV, str(tmp_path / "kern.log"))
    lines, source = K.read()
    found = by_member(K.findings(lines, source, K.gpu_addresses(Nvml())))
    gpu0, gpu1 = "gpu 0 (NVIDIA H100 80GB HBM3)", "gpu 1 (NVIDIA H100 80GB HBM3)"
    assert set(found) == {(gpu0, "Xid 13"), (gpu0, "Xid 79"), (gpu1, "Xid 48"), ("PCI 0000:99:00", "Xid 999"),
                          ("NVSwitch PCI 0000:05:00", "SXid 12028"), ("NVSwitch PCI 0000:c8:00", "SXid 20034")}
    fell = found[(gpu0, "Xid 79")]
    assert fell.status == "error" and fell.detail.startswith("Xid 79 x2 in ")  # one line per kind, counted
    assert "fallen off the bus" in fell.detail and "drain the node" in fell.detail and "kern.log" in fell.detail
    assert found[(gpu0, "Xid 13")].status == "warning"  # the application's: on the allow-list
    assert found[(gpu1, "Xid 48")].status == "error" and "double-bit ECC" in found[(gpu1, "Xid 48")].detail
    assert found[("PCI 0000:99:00", "Xid 999")].status == "error"  # unknown: not on the allow-list
    assert "NVIDIA's Xid catalog" in found[("PCI 0000:99:00", "Xid 999")].detail
    assert found[("NVSwitch PCI 0000:05:00", "SXid 12028")].status == "warning"  # non-fatal
    assert found[("NVSwitch PCI 0000:c8:00", "SXid 20034")].status == "error"  # fatal
    statuses = [f.status for f in K.findings(lines, source)]
    assert statuses == sorted(statuses, key=lambda s: s != "error")  # errors first


def test_the_allow_list_is_the_applications_and_the_recovered_xids():
    for code in (13, 31, 43, 45, 63, 68, 92, 109):
        assert K.status_of(K.Event("Xid", "0000:01:00", code, ""))[0] == "warning"
    for code in (48, 61, 62, 64, 74, 79, 94, 95, 119, 120):
        assert K.status_of(K.Event("Xid", "0000:01:00", code, ""))[0] == "error"


def test_a_clean_log_is_ok_and_says_where_it_looked(tmp_path, monkeypatch):
    (tmp_path / "kern.log").write_text("[ 1.0] Linux version 6.1\n[ 2.0] eth0: link up\n")
    monkeypatch.setenv(K.LOG_ENV, str(tmp_path / "kern.log"))
    (only,) = K.findings(*K.read())
    assert only.status == "ok" and "no Xid or SXid event" in only.detail and "(2 lines)" in only.detail


def test_a_log_that_cannot_be_read_is_not_applicable_never_ok(tmp_path, monkeypatch):
    monkeypatch.setenv(K.LOG_ENV, str(tmp_path / "absent.log"))
    (only,) = K.findings(*K.read())
    assert only.status == "n/a" and "not readable here" in only.detail and "No such file" in only.detail


@pytest.mark.parametrize("address, key", [("0000:3B:00", "0000:3b:00"), ("00000000:3b:00.0", "0000:3b:00"),
                                          ("3b:00.0", "0000:3b:00"), ("0001:c8:1f.7", "0001:c8:1f")])
def test_pci_addresses_match_whatever_their_form(address, key):
    assert K.pci_key(address) == key
