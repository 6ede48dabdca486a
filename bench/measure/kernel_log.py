"""The GPU errors in the kernel log, for ``bench preflight``: NVIDIA's Xid events (the GPU driver's) and SXid events
(the NVSwitch driver's) since boot, each mapped to the GPU it names by PCI address.

NVML reports Xid events only while a process listens for them; the driver writes every one to the kernel log, so
a GPU that faulted before the run started is found there (operators' health checks read it for the same reason:
Meta's GCM ``check-syslogs xid``, Imbue's and NVIDIA's own). The log is read from the first source that is readable
here, and the finding says which: ``journalctl -k -b`` (this boot, where journald keeps the kernel's messages),
``/dev/kmsg`` and then ``dmesg`` (the kernel's ring buffer: since boot, or since it last wrapped).
``HVDBENCH_KERNEL_LOG`` names a file read instead (the tests' fake log). A log none of them can read is ``n/a``
with why, never ``ok``: a container without CAP_SYSLOG, ``kernel.dmesg_restrict`` for a user who is not root.

What an Xid means, and the allow-list: an Xid caused by the application (a fault in the user's kernel, a context
switch timeout) or one the driver recovers from is a ``warning``; every other Xid is an ``error`` (drain the node:
the GPU needs a reset, a reboot or service). The allow-list is Meta's GCM's non-critical set, {13, 31, 43, 45, 63,
68, 92, 109} (gcm/health_checks/check_utils/xid_error_codes.py: NVIDIA's Kubernetes device plugin's list, which
does not mark a GPU unhealthy for 13, 31, 43, 45, 68 or 109, with 63 and 92 added), and the meanings are NVIDIA's
Xid catalog's (docs.nvidia.com/deploy/xid-errors). An SXid is an ``error`` where the driver calls it fatal, else a
``warning``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass

from bench.measure.env_faults import Finding

LOG_ENV = "HVDBENCH_KERNEL_LOG"
CHECK = "kernel-log"
# "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus." and
# "nvidia-nvswitch3: SXid (PCI:0000:c8:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error"
XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(?:, ?(.*))?")
SXID = re.compile(r"SXid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)(?:, ?(.*))?")
# The Xids of the application or recovered by the driver (module docstring): a warning, not an error.
ALLOWED = {13, 31, 43, 45, 63, 68, 92, 109}
MEANING = {
    13: "graphics engine exception (usually the application's kernel: an out-of-range access)",
    31: "GPU memory page fault (usually the application: an illegal address)",
    43: "GPU stopped processing (usually the application's fault; the GPU goes on)",
    45: "preemptive cleanup after earlier errors (a process was stopped)",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint or warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recorded (takes effect at the next GPU reset)",
    64: "ECC page retirement or row remapper recording failure",
    68: "video decoder (NVDEC) exception",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (the application that hit it is stopped)",
    95: "uncontained ECC error (every application on the GPU is affected)",
    109: "context switch timeout",
    119: "GSP RPC timeout",
    120: "GSP error",
}
TO_DO = {"error": "drain the node: reset the GPU (nvidia-smi -r) or reboot, and have it serviced if it comes back",
         "warning": "usually the application's or recovered: look at the job that ran then if it repeats"}


@dataclass(frozen=True)
class Event:
    kind: str  # Xid or SXid
    pci: str  # domain:bus:device, as pci_key gives it
    code: int
    text: str  # the rest of the line after the code


def pci_key(address: str) -> str:
    """'0000:3B:00', '00000000:3b:00.0' or '3b:00.0' -> '0000:3b:00': the domain, bus and device, no function."""
    parts = address.strip().lower().split(":")
    domain, bus, devfn = (["0", *parts] if len(parts) == 2 else parts)[-3:]
    try:
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(devfn.split('.')[0], 16):02x}"
    except ValueError:
        return address.strip().lower()


def events(lines: list[str]) -> list[Event]:
    """The Xid and SXid events of the log's lines, in order."""
    found = []
    for line in lines:
        for kind, pattern in (("Xid", XID), ("SXid", SXID)):
            if m := pattern.search(line):
                found.append(Event(kind, pci_key(m.group(1)), int(m.group(2)), (m.group(3) or "").strip()))
                break
    return found


def _kmsg() -> list[str]:
    """The ring buffer's records through /dev/kmsg, without waiting for new ones: each record's message."""
    fd = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
    lines = []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except BrokenPipeError:  # a record overwritten while read: go on from the next
                continue
            if not record:
                break
            header, _, message = record.decode(errors="replace").partition(";")
            lines.append(message.split("\n", 1)[0])
    finally:
        os.close(fd)
    return lines


def read() -> tuple[list[str] | None, str]:
    """(the kernel log's lines, where they came from), or (None, why none could be read)."""
    path = os.environ.get(LOG_ENV)
    if path:
        try:
            with open(path, errors="replace") as f:
                return f.read().splitlines(), f"{path} ({LOG_ENV})"
        except OSError as exc:
            return None, f"{LOG_ENV}={path}: {exc.strerror}"
    tried = []
    if shutil.which("journalctl"):
        try:
            done = subprocess.run(["journalctl", "-k", "-b", "-o", "cat", "-q", "--no-pager"], capture_output=True,
                                  text=True, errors="replace", timeout=60)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.splitlines(), "journalctl -k -b, this boot's kernel messages"
            tried.append(f"journalctl: {(done.stderr.strip().splitlines() or ['no kernel messages'])[0]}")
        except subprocess.TimeoutExpired:
            tried.append("journalctl: no answer in 60 s")
    try:
        return _kmsg(), "/dev/kmsg, the ring buffer since boot or its last wrap"
    except OSError as exc:
        tried.append(f"/dev/kmsg: {exc.strerror}")
    if shutil.which("dmesg"):
        done = subprocess.run(["dmesg"], capture_output=True, text=True, errors="replace", timeout=60)
        if done.returncode == 0:
            return done.stdout.splitlines(), "dmesg, the ring buffer since boot or its last wrap"
        tried.append(f"dmesg: {(done.stderr.strip().splitlines() or [f'exit {done.returncode}'])[0]}")
    else:
        tried.append("dmesg: not installed")
    return None, "; ".join(tried)


def gpu_addresses(nvml) -> dict[str, str]:
    """PCI address (pci_key) -> 'gpu N (name)' for every GPU NVML reaches (none it cannot)."""
    found = {}
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            bus = nvml.nvmlDeviceGetPciInfo(handle).busId
            name = nvml.nvmlDeviceGetName(handle)
        except nvml.NVMLError:
            continue
        bus = bus.decode() if isinstance(bus, bytes) else bus
        found[pci_key(bus)] = f"gpu {i} ({name.decode() if isinstance(name, bytes) else name})"
    return found


def status_of(event: Event) -> tuple[str, str]:
    """(error or warning, what it means) for one event."""
    if event.kind == "SXid":
        fatal = "fatal" in event.text.lower() and "non-fatal" not in event.text.lower()
        return ("error" if fatal else "warning"), f"NVSwitch {'fatal' if fatal else 'non-fatal'} error"
    meaning = MEANING.get(event.code, "see NVIDIA's Xid catalog")
    return ("warning" if event.code in ALLOWED else "error"), meaning


def findings(lines: list[str] | None, source: str, gpus: dict[str, str] | None = None) -> list[Finding]:
    """One finding per kind, device and code of event (how many, what it means, what to do); ok where there are
    none, n/a where the log could not be read (``source`` is then why)."""
    if lines is None:
        return [Finding(CHECK, "-", "n/a", f"the kernel log is not readable here ({source}): Xid events not "
                        "checked (as root on the host, or with CAP_SYSLOG)")]
    found = events(lines)
    if not found:
        return [Finding(CHECK, "-", "ok", f"no Xid or SXid event in {source} ({len(lines)} lines)")]
    gpus = gpus or {}
    out = []
    for (kind, pci, code), count in Counter((e.kind, e.pci, e.code) for e in found).items():
        first = next(e for e in found if (e.kind, e.pci, e.code) == (kind, pci, code))
        status, meaning = status_of(first)
        member = gpus.get(pci, f"PCI {pci}" if kind == "Xid" else f"NVSwitch PCI {pci}")
        out.append(Finding(CHECK, member, status, f"{kind} {code} x{count} in {source}: {meaning}"
                           f"{' (' + first.text[:120] + ')' if first.text else ''}; {TO_DO[status]}"))
    return sorted(out, key=lambda f: (f.status != "error", f.member))
