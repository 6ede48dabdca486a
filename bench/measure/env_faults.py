"""The environment faults that spoil a multi-node run an hour in, found before it starts (``bench preflight``).

Each check gives findings: one line each, what was seen and what to do, with a status:

* ``error``: the run would fail or measure something else (a driver too old for a framework's CUDA, a GPU with
  uncorrected ECC errors or a pending page retirement or row remap, a network interface named for NCCL or Gloo
  that does not exist or is down, an InfiniBand port NCCL is told to use that is not ACTIVE);
* ``warning``: the run would measure less than the hardware does (other processes on a GPU, an InfiniBand port
  below the others' rate, a host reached through another interface than the one NCCL or Gloo is told to use, or
  a host several interfaces could reach with none named);
* ``ok``: checked, nothing found; ``n/a``: not checkable here (the reason says why).

The checks read NVML (nvidia-ml-py) and sysfs (``/sys/class/net``, ``/sys/class/infiniband``; the root is
:data:`SYSFS`, moved by ``HVDBENCH_SYSFS`` for tests), and the frameworks' CUDA from ``bench env``'s record. No
packet is sent: the interface towards a host is the one the kernel's routing table picks (a UDP socket's
``connect``, which sends nothing). Xid events are the kernel log's (bench.measure.kernel_log): NVML reports them
only while it listens, not the ones before it started.
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.launching import envs
from bench.measure.nvml import load_nvml
from bench.measure.thresholds import cited

SYSFS = Path(os.environ.get("HVDBENCH_SYSFS", "/sys"))
# The oldest Linux driver each CUDA major version runs on: a framework built for CUDA 12.x or 13.x needs these.
MIN_DRIVER = {12: envs.MIN_DRIVER_CUDA12, 13: envs.MIN_DRIVER}
IFNAME_ENVS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
DOWN = ("down", "lowerlayerdown", "notpresent")  # operstate values of an interface that carries nothing


@dataclass(frozen=True)
class Finding:
    check: str  # driver, gpu, network, infiniband
    member: str  # what it is about: a framework, "gpu 0 (NVIDIA H100 80GB HBM3)", an interface, a port, a host
    status: str  # error, warning, ok, n/a
    detail: str  # what was seen, and what to do

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def cuda_of(text: str | None) -> tuple[int, int] | None:
    """'13.0' / '12.5.1' / 13000 (NVML's form) -> (major, minor); None for none."""
    if text is None:
        return None
    if isinstance(text, int):
        return text // 1000, (text % 1000) // 10
    parts = str(text).split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def driver_findings(driver: str | None, driver_cuda: Any, frameworks: dict[str, str | None]) -> list[Finding]:
    """The driver against the CUDA each framework was built for (``frameworks``: name -> its CUDA version, None
    for a CPU build). A driver whose own CUDA has a lower major version than a framework's cannot run it; the same
    major version runs any minor one (minor-version compatibility)."""
    have = cuda_of(driver_cuda)
    out = []
    for name, built in frameworks.items():
        wanted = cuda_of(built)
        if wanted is None:
            out.append(Finding("driver", name, "n/a", "a CPU build: it uses no GPU"))
        elif have is None:
            out.append(Finding("driver", name, "n/a", f"built for CUDA {built}; no NVIDIA driver answers here"))
        elif have[0] < wanted[0]:
            need = MIN_DRIVER.get(wanted[0], f"one for CUDA {wanted[0]}")
            out.append(Finding("driver", name, "error", f"built for CUDA {built}, but driver {driver} runs CUDA "
                               f"{have[0]}.{have[1]} at most: install driver {need} or newer, or use a build of "
                               f"{name} for CUDA {have[0]}"))
        else:
            out.append(Finding("driver", name, "ok", f"built for CUDA {built}; driver {driver} runs CUDA "
                               f"{have[0]}.{have[1]}"))
    return out


def _call(nvml, fn, *args):
    """An NVML query's value, or the NVMLError's name where the device does not answer it (NotSupported, ...)."""
    try:
        return fn(*args), None
    except nvml.NVMLError as exc:
        return None, type(exc).__name__.replace("NVMLError_", "") or str(exc)


def pack_findings(nvml, h, model: str | None, member: str, packs, check: str = "gpu") -> list[Finding]:
    """The GPU's ECC counters by location, its corrected ECC total since the driver loaded and its retired pages
    against its model's threshold pack (bench.measure.thresholds): a count over a published limit is an error, the
    limit and its source named (bench preflight, bench soak)."""
    if packs is None:
        return []
    out = []
    counter = getattr(nvml, "nvmlDeviceGetMemoryErrorCounter", None)
    for key, location, kinds in (("ecc_sram_correctable_max", "NVML_MEMORY_LOCATION_SRAM", ("CORRECTED",)),
                                 ("ecc_dram_max", "NVML_MEMORY_LOCATION_DRAM", ("CORRECTED", "UNCORRECTED"))):
        limit = packs.get(model, key)
        if limit is None or counter is None or not hasattr(nvml, location):
            continue
        counts = {}
        for kind in kinds:
            for scope in ("VOLATILE", "AGGREGATE"):
                value, _ = _call(nvml, counter, h, getattr(nvml, f"NVML_MEMORY_ERROR_TYPE_{kind}"),
                                 getattr(nvml, f"NVML_{scope}_ECC"), getattr(nvml, location))
                if value is not None:
                    counts[f"{kind.lower()} {scope.lower()}"] = value
        over = {k: v for k, v in counts.items() if v > limit.value}
        if over:
            where = location.rsplit("_", 1)[1]
            seen = ", ".join(f"{k} {v}" for k, v in over.items())
            out.append(Finding(check, member, "error", f"{where} ECC errors {seen} over the {limit.value:.10g} "
                               f"allowed ({cited(limit)}): drain the node and have the GPU checked "
                               "(nvidia-smi -q -d ECC)"))
    limit = packs.get(model, "ecc_corrected_volatile_max")
    if limit is not None and hasattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED"):
        corrected, _ = _call(nvml, nvml.nvmlDeviceGetTotalEccErrors, h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                             nvml.NVML_VOLATILE_ECC)
        if corrected is not None and corrected > limit.value:
            out.append(Finding(check, member, "error", f"{corrected} corrected ECC errors since the driver loaded, "
                               f"over the {limit.value:.10g} allowed ({cited(limit)}): have the GPU checked "
                               "(nvidia-smi -q -d ECC)"))
    limit = packs.get(model, "retired_pages_max")
    pages = getattr(nvml, "nvmlDeviceGetRetiredPages", None)
    for cause, what in (("MULTIPLE_SINGLE_BIT_ECC_ERRORS", "multiple single-bit"),
                        ("DOUBLE_BIT_ECC_ERROR", "double-bit")):
        code = getattr(nvml, f"NVML_PAGE_RETIREMENT_CAUSE_{cause}", None)
        if limit is None or pages is None or code is None:
            continue
        retired, _ = _call(nvml, pages, h, code)  # NotSupported from Ampere on: rows are remapped instead
        if retired is not None and len(retired) > limit.value:
            out.append(Finding(check, member, "error", f"{len(retired)} pages retired for {what} ECC errors, over "
                               f"the {limit.value:.10g} allowed ({cited(limit)}): the GPU needs service"))
    return out


def gpu_findings(nvml, processes: bool = True, packs=None) -> list[Finding]:
    """Every GPU NVML sees: other processes on it (``processes``: not where a run's own ranks may already hold
    their GPUs), uncorrected ECC errors since the driver loaded, a page retirement or row remap waiting for a
    reset, a failed row remap; with threshold ``packs`` (bench.measure.thresholds), its ECC counts by location
    and its remapped rows against its model's published limits; and the GPUs of one model flashed with different
    VBIOS versions."""
    own = {os.getpid()}
    out = []
    vbios: dict[str, dict[int, str]] = {}  # model -> GPU -> its VBIOS
    for i in range(nvml.nvmlDeviceGetCount()):
        # a GPU fallen off the bus (GpuIsLost), one the cgroup hides (NoPermission), an IRQ or power fault: NVML
        # refuses its handle, which is the finding; the other GPUs are still checked
        h, lost = _call(nvml, nvml.nvmlDeviceGetHandleByIndex, i)
        if lost:
            out.append(Finding("gpu", f"gpu {i}", "error", f"NVML cannot reach it ({lost}): a GPU fallen off the "
                               "bus or without power needs a reset or service (nvidia-smi -q, the kernel log's "
                               "Xid lines); a run that would use it fails"))
            continue
        name, _ = _call(nvml, nvml.nvmlDeviceGetName, h)
        name = name.decode() if isinstance(name, bytes) else name
        member = f"gpu {i} ({name})"
        version, _ = _call(nvml, nvml.nvmlDeviceGetVbiosVersion, h) if hasattr(nvml, "nvmlDeviceGetVbiosVersion") \
            else (None, None)
        if version:
            vbios.setdefault(name, {})[i] = version.decode() if isinstance(version, bytes) else version
        procs, why = _call(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, h) if processes else ([], None)
        others = [p for p in procs or [] if p.pid not in own]
        if why:
            out.append(Finding("gpu", member, "n/a", f"its processes cannot be listed ({why})"))
        elif others:
            used = sum(p.usedGpuMemory or 0 for p in others) / 2**30
            out.append(Finding("gpu", member, "warning", f"{len(others)} other process(es) on it (pid "
                               f"{', '.join(str(p.pid) for p in others)}; {used:.1f} GiB): a run beside them "
                               "measures less; stop them or pick other GPUs (CUDA_VISIBLE_DEVICES)"))
        ecc, ecc_why = _call(nvml, nvml.nvmlDeviceGetTotalEccErrors, h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                             nvml.NVML_VOLATILE_ECC)
        if ecc:
            out.append(Finding("gpu", member, "error", f"{ecc} uncorrected ECC error(s) since the driver loaded: "
                               "drain the node and have the GPU checked (nvidia-smi -q -d ECC)"))
        pending, _ = _call(nvml, nvml.nvmlDeviceGetRetiredPagesPendingStatus, h)
        if pending:
            out.append(Finding("gpu", member, "error", "a retired page waits for a GPU reset: reset it "
                               "(nvidia-smi -r, or reboot the node) before measuring"))
        rows, _ = _call(nvml, nvml.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            _corrected, uncorrected, remap_pending, failed = rows
            if failed:
                out.append(Finding("gpu", member, "error", "a row remap failed: the GPU needs service"))
            elif remap_pending:
                out.append(Finding("gpu", member, "error", "a row remap waits for a GPU reset: reset it "
                                   "(nvidia-smi -r, or reboot the node) before measuring"))
            elif uncorrected:
                limit = packs.get(name, "remapped_rows_uncorrectable_max") if packs else None
                if limit is not None and uncorrected > limit.value:
                    out.append(Finding("gpu", member, "error", f"{uncorrected} row(s) remapped after uncorrectable "
                                       f"errors, over the {limit.value:.10g} allowed ({cited(limit)}): "
                                       "the GPU needs service"))
                else:
                    out.append(Finding("gpu", member, "warning", f"{uncorrected} row(s) remapped after "
                                       "uncorrectable errors: watch this GPU"))
        out += pack_findings(nvml, h, name, member, packs)
        if not any(f.member == member and f.status in ("error", "warning") for f in out):
            out.append(Finding("gpu", member, "ok", ("no other process, " if processes else "")
                               + "no uncorrected ECC error, no reset pending"
                               + ("" if ecc is not None else f" (ECC not reported: {ecc_why})")))
    for model, versions in vbios.items():
        if len(set(versions.values())) > 1:
            seen = ", ".join(f"gpu {i} {v}" for i, v in versions.items())
            out.append(Finding("gpu", f"node ({model})", "error", f"the VBIOS differs across the node's {model} "
                               f"GPUs ({seen}): GPUs flashed apart behave apart; flash them alike (as Meta's GCM "
                               "vbios_mismatch check fails it)"))
    return out


def interface_state(name: str) -> str | None:
    """An interface's operstate (up, down, unknown: a virtual one that reports none); None where it does not
    exist."""
    path = SYSFS / "class" / "net" / name / "operstate"
    return _read(path) if path.exists() else None


def interfaces() -> list[str]:
    try:
        return sorted(p.name for p in (SYSFS / "class" / "net").iterdir())
    except OSError:
        return []


def named_interfaces(environ: dict[str, str]) -> dict[str, list[tuple[str, bool]]]:
    """NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME -> (name, exact) of each interface it names. NCCL's names are
    prefixes ('eth' takes eth0 and eth1) unless the list starts with '=', and a list starting with '^' names the
    interfaces not to use (left out here); Gloo's are exact names."""
    out = {}
    for var in IFNAME_ENVS:
        value = environ.get(var, "").strip()
        if not value or value.startswith("^"):
            continue
        exact = var == "GLOO_SOCKET_IFNAME" or value.startswith("=")
        out[var] = [(v.strip(), exact) for v in value.lstrip("=").split(",") if v.strip()]
    return out


def route_interface(host: str) -> tuple[str | None, str]:
    """(the interface the routing table picks towards ``host``, its local address or why there is none): a UDP
    socket's connect, which sends nothing."""
    try:
        family, _, _, _, address = socket.getaddrinfo(host, 9, type=socket.SOCK_DGRAM)[0]
    except OSError as exc:
        return None, f"does not resolve ({exc.strerror or exc})"
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect(address)
        except OSError as exc:
            return None, f"no route ({exc.strerror or exc})"
        local = s.getsockname()[0]
    for name in interfaces():
        if local in addresses_of(name):
            return name, local
    return None, local


def addresses_of(name: str) -> set[str]:
    """The IPv4 and IPv6 addresses of an interface (``socket.if_nameindex`` knows names only: ioctl for v4,
    /proc/net/if_inet6 for v6)."""
    found: set[str] = set()
    try:
        import fcntl
        import struct

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            found.add(socket.inet_ntoa(packed[20:24]))
    except OSError:
        pass
    try:
        for line in Path("/proc/net/if_inet6").read_text().splitlines():
            fields = line.split()
            if len(fields) == 6 and fields[5] == name:
                found.add(socket.inet_ntop(socket.AF_INET6, bytes.fromhex(fields[0])))
    except OSError:
        pass
    return found


def network_findings(environ: dict[str, str], hosts: list[str]) -> list[Finding]:
    """The interfaces NCCL and Gloo are told to use exist and are up; each host in ``hosts`` resolves and has a
    route (the interface the routing table picks towards it is said; one other than the named ones is no fault)."""
    out = []
    named = named_interfaces(environ)
    present = interfaces()
    wanted: set[str] = set()
    for var, names in named.items():
        for name, exact in names:
            matches = [i for i in present if (i == name if exact else i.startswith(name))]
            member = f"{var}={name}"
            states = {i: interface_state(i) for i in matches}
            up = [i for i in matches if states[i] not in DOWN]
            wanted.update(matches)
            if not matches:
                what = f"named {name}" if exact else f"whose name starts with {name}"
                out.append(Finding("network", member, "error", f"no interface {what} here (these are: "
                                   f"{', '.join(present) or 'none'}): fix {var}"))
            elif not up:
                down = ", ".join(f"{i} is {states[i]}" for i in matches)
                out.append(Finding("network", member, "error", f"{down}: bring it up or fix {var}"))
            else:
                out.append(Finding("network", member, "ok", "; ".join(
                    f"{i} is up" if states[i] == "up" else
                    f"{i} exists (it reports no link state, as loopback and most virtual interfaces do)" for i in up)))
    for host in hosts:
        via, local = route_interface(host)
        if via is None:
            out.append(Finding("network", host, "error", f"{host}: {local}"))
        elif wanted and via not in wanted:
            # Not a fault: host names commonly resolve to the management network while NCCL_SOCKET_IFNAME names
            # the fabric; NCCL and Gloo exchange the named interface's own addresses, and the host name carries the
            # launcher's rendezvous only (which needs the route found here).
            out.append(Finding("network", host, "ok", f"reached through {via} ({local}), by its name: the "
                               f"rendezvous' route; the ranks' traffic goes through {', '.join(sorted(wanted))} "
                               f"({' and '.join(named)}), whose own addresses NCCL and Gloo exchange"))
        else:
            out.append(Finding("network", host, "ok", f"reached through {via} ({local})"))
    return out


@dataclass(frozen=True)
class IbHca:
    """NCCL_IB_HCA as NCCL reads it: a comma-separated list of card names, each a prefix ('mlx5' is every mlx5
    card) unless the list starts with '=' (exact names), optionally with ':port' (that port alone, else every
    port); a list that starts with '^' (or '^=') names the cards and ports NOT to use. Empty: every port."""
    entries: tuple[tuple[str, str | None], ...] = ()
    exact: bool = False
    exclude: bool = False

    def uses(self, device: str, port: str) -> bool:
        """Whether NCCL uses ``device``'s ``port`` under this setting."""
        if not self.entries:
            return True
        named = any((device == name if self.exact else device.startswith(name)) and wanted in (None, port)
                    for name, wanted in self.entries)
        return named != self.exclude


def ib_hca(value: str) -> IbHca:
    """NCCL_IB_HCA's value read by NCCL's rules (:class:`IbHca`)."""
    value = value.strip()
    exclude = value.startswith("^")
    value = value[1:] if exclude else value
    exact = value.startswith("=")
    value = value[1:] if exact else value
    entries = []
    for item in (v.strip() for v in value.split(",") if v.strip()):
        name, _, port = item.partition(":")
        entries.append((name.strip(), port.strip() or None))
    return IbHca(tuple(entries), exact, exclude)


def infiniband_findings(environ: dict[str, str]) -> list[Finding]:
    """Every InfiniBand (or RoCE) port: its state and rate. A port NCCL_IB_HCA selects that is not ACTIVE is an
    error; one not ACTIVE otherwise, or one below the fastest port's rate, a warning."""
    root = SYSFS / "class" / "infiniband"
    try:
        devices = sorted(root.iterdir())
    except OSError:
        return []
    hca = ib_hca(environ.get("NCCL_IB_HCA", ""))
    selected = bool(hca.entries)
    ports = [(f"{device.name}:{port.name}", device.name, port.name, _read(port / "state"), _read(port / "rate"))
             for device in devices for port in sorted((device / "ports").glob("*"))]
    fastest = max((_gbps(rate) for *_, rate in ports), default=0.0)
    out = []
    for member, device, port, state, rate in ports:
        used = hca.uses(device, port)
        if "ACTIVE" not in state:
            status = "error" if selected and used else "warning"
            out.append(Finding("infiniband", member, status, f"port {state or 'state unknown'}"
                               + (" and NCCL_IB_HCA selects it" if selected and used else "")
                               + ": check the cable and the switch port (ibstat)"))
        elif _gbps(rate) < fastest:
            out.append(Finding("infiniband", member, "warning", f"at {rate}, below the fastest port's "
                               f"{fastest:g} Gb/sec: a link trained at a lower rate (ibstat; reseat the cable)"))
        else:
            out.append(Finding("infiniband", member, "ok", f"ACTIVE at {rate}"))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _gbps(rate: str) -> float:
    """sysfs's '200 Gb/sec (4X HDR)' -> 200.0."""
    try:
        return float(rate.split()[0])
    except (IndexError, ValueError):
        return 0.0


def cheap(processes: bool, environ: dict[str, str] | None = None) -> list[Finding]:
    """The checks cheap enough for the start of every run (no framework imported): the GPUs (their processes
    where ``processes``), the interfaces named for NCCL and Gloo, the InfiniBand ports; no GPU finding where NVML
    is absent."""
    environ = dict(os.environ if environ is None else environ)
    found = network_findings(environ, []) + infiniband_findings(environ)
    nvml, _ = load_nvml()
    if nvml is None:
        return found
    try:
        return gpu_findings(nvml, processes) + found
    finally:
        nvml.nvmlShutdown()
