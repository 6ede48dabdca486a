"""The environment recorded with every result and printed by ``bench env``.

Framework parts are collected only for frameworks already imported by the mode (or, for
``bench env``, importable): recording never pays for an import the run did not need.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import __version__
from bench.launching import envs
from bench.launching.supervise import usable_cores
from bench.measure.nvml import load_nvml
from bench.tfutil import import_tf, quiet_startup
from bench.vocabulary import FRAMEWORKS


def _first_line(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else None


@functools.lru_cache(maxsize=1)
def mpi_version() -> str | None:
    return _first_line(["mpirun", "--version"])


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def container() -> str | None:
    if os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER"):
        return "apptainer/singularity"
    if os.path.exists("/.dockerenv"):
        return "docker"
    if os.path.exists("/run/.containerenv"):
        return "podman"
    return None


def shm_gib() -> float | None:
    """Size of /dev/shm: NCCL's shared-memory transport needs more than Docker's 64 MiB default."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return round(st.f_blocks * st.f_frsize / 2**30, 3)


def numa_nodes() -> int | None:
    try:
        return len([n for n in os.listdir("/sys/devices/system/node") if n.startswith("node") and n[4:].isdigit()])
    except OSError:
        return None


def loaded_libraries() -> dict[str, list[str]]:
    """The CUDA-stack and MPI libraries mapped into this process right now (/proc/self/maps): what was
    really loaded, whichever framework loaded it."""
    wanted = {"nccl": "libnccl", "cudnn": "libcudnn.so", "cudart": "libcudart", "cublas": "libcublas.so",
              "mpi": "libmpi.so"}
    found: dict[str, set[str]] = {k: set() for k in wanted}
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.rsplit(None, 1)[-1]
                name = os.path.basename(path)
                for key, prefix in wanted.items():
                    if name.startswith(prefix):
                        found[key].add(os.path.realpath(path))
    except OSError:
        return {}
    return {k: sorted(v) for k, v in found.items() if v}


def topology() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def nvml_gpus() -> dict[str, Any]:
    """Every GPU NVML sees: name, memory, compute capability, ECC, power limit, plus the driver."""
    nvml, reason = load_nvml()
    if nvml is None:
        return {"available": False, "reason": reason}

    def get(fn, *args):
        try:
            value = fn(*args)
        except nvml.NVMLError as exc:
            return f"unavailable: {type(exc).__name__.replace('NVMLError_', '')}"
        return value.decode() if isinstance(value, bytes) else value

    try:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
            except nvml.NVMLError as exc:  # fallen off the bus, hidden by the cgroup: recorded, never fatal
                gpus.append({"index": i, "unavailable": type(exc).__name__.replace("NVMLError_", "")})
                continue
            mem = get(nvml.nvmlDeviceGetMemoryInfo, h)
            cc = get(nvml.nvmlDeviceGetCudaComputeCapability, h)
            ecc = get(nvml.nvmlDeviceGetEccMode, h)
            limit = get(nvml.nvmlDeviceGetPowerManagementLimit, h)
            gpus.append({
                "index": i, "name": get(nvml.nvmlDeviceGetName, h), "uuid": get(nvml.nvmlDeviceGetUUID, h),
                "memory_gib": round(mem.total / 2**30, 2) if hasattr(mem, "total") else mem,
                "compute_capability": f"{cc[0]}.{cc[1]}" if isinstance(cc, tuple) else cc,
                "ecc_enabled": bool(ecc[0]) if isinstance(ecc, (list, tuple)) else ecc,
                "power_limit_w": limit / 1000 if isinstance(limit, int) else limit,
            })
        return {"available": True, "driver": get(nvml.nvmlSystemGetDriverVersion),
                "cuda_driver_version": get(nvml.nvmlSystemGetCudaDriverVersion), "gpus": gpus}
    finally:
        nvml.nvmlShutdown()


# Environment variables that decide throughput (transport, fusion, threads, devices); recorded by prefix.
SETTING_PREFIXES = ("NCCL_", "HOROVOD_", "OMPI_MCA_", "UCX_", "TF_", "GLOO_", "TORCH_", "MKL_", "KMP_",
                    "PMIX_MCA_", "FI_")
SETTING_NAMES = ("OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                 "LD_PRELOAD")
# Settings that carry a secret or a per-process value rather than a setting, left out.
SETTING_SKIP = ("TF_CONFIG", "HOROVOD_GLOO_RENDEZVOUS_", "HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "HOROVOD_CROSS_RANK",
                "HOROVOD_HOSTNAME", "OMPI_MCA_orte_hnp_uri", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_pmix",
                "OMPI_MCA_ess_base_vpid")
# Packages whose versions decide throughput or correctness.
PACKAGES = ("torch", "tensorflow", "tensorflow-cpu", "tf-keras", "horovod", "numpy", "nvidia-nccl-cu12",
            "nvidia-nccl-cu13", "nvidia-cudnn-cu12", "nvidia-cudnn-cu13", "nvidia-ml-py", "mpi4py", "typer", "rich")


def settings(env: dict[str, str] | None = None) -> dict[str, str]:
    """The throughput-deciding variables set in this process (NCCL_*, HOROVOD_*, OMPI_MCA_*, UCX_*, TF_*,
    OMP_NUM_THREADS, CUDA_VISIBLE_DEVICES, ...), per-process identities and rendezvous secrets left out."""
    env = dict(os.environ if env is None else env)
    return {k: v for k, v in sorted(env.items())
            if (k.startswith(SETTING_PREFIXES) or k in SETTING_NAMES) and not k.startswith(SETTING_SKIP)}


def package_versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


SIF_LABELS = "/.singularity.d/labels.json"  # inside an Apptainer/Singularity container
SIF_SOURCE_LABEL = "org.label-schema.usage.singularity.deffile.from"  # what the SIF was built or pulled from


def image_digest() -> dict[str, str]:
    """The image's registry digest, where the runtime can tell: HVDBENCH_IMAGE_DIGEST (``sha256:...`` or
    ``REGISTRY/hvdbench@sha256:...``, as ``docker inspect`` lists RepoDigests), else the reference a SIF was pulled
    from when it names a digest (`make sif-pull` pulls by digest). A container cannot see its own digest
    otherwise."""
    ref = os.environ.get("HVDBENCH_IMAGE_DIGEST", "")
    if not ref:
        try:
            ref = json.loads(Path(SIF_LABELS).read_text()).get(SIF_SOURCE_LABEL, "")
        except (OSError, ValueError):
            return {}
        if "@sha256:" not in ref:
            return {}
    digest = ref.rsplit("@", 1)[-1]
    return {"digest": digest, **({"reference": ref} if "@" in ref else {})} if digest.startswith("sha256:") else {}


def image() -> dict[str, str] | None:
    """The hvdbench image this runs in (the Dockerfile sets these; publishing adds the revision), with its
    digest where the runtime can tell (image_digest), or None outside one."""
    keys = {"stack": "HVDBENCH_IMAGE_STACK", "flavor": "HVDBENCH_IMAGE_FLAVOR", "version": "HVDBENCH_IMAGE_VERSION",
            "revision": "HVDBENCH_IMAGE_REVISION"}
    found = {k: os.environ[v] for k, v in keys.items() if os.environ.get(v)}
    if found:
        found.update(image_digest())
    return found or None


def base() -> dict[str, Any]:
    return {
        "hvdbench": __version__,
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "environment": sys.prefix,  # which Python environment ran it (the CUDA image has one per framework)
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable_cores(),  # the CPU affinity, no more than the cgroup's quota (bench.launching.supervise)
        "numa_nodes": numa_nodes(),
        "shm_gib": shm_gib(),
        "mpi": mpi_version(),
        "container": container(),
        "slurm_job_id": os.environ.get("SLURM_JOB_ID"),
        "image": image(),
        "settings": settings(),
        "packages": package_versions(),
        "nvml": nvml_gpus(),
        "loaded_libraries": loaded_libraries(),
    }


def torch_info() -> dict[str, Any]:
    import torch

    cudnn = nccl = None
    gpus = []
    if torch.cuda.is_available():
        cudnn = torch.backends.cudnn.version()
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            pass
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": p.name, "memory_gib": round(p.total_memory / 2**30, 2),
                         "capability": f"{p.major}.{p.minor}"})
    return {"version": torch.__version__, "cuda": torch.version.cuda, "cudnn": cudnn, "nccl": nccl, "gpus": gpus}


def tf_info() -> dict[str, Any]:
    tf, keras = import_tf()
    build = tf.sysconfig.get_build_info()
    gpus = []
    with quiet_startup():
        found = tf.config.list_physical_devices("GPU")
    for g in found:
        details = tf.config.experimental.get_device_details(g)
        gpus.append({"name": details.get("device_name"), "capability": details.get("compute_capability")})
    return {"version": tf.__version__, "keras": f"tf-keras {keras.__version__}",
            "cuda": build.get("cuda_version"), "cudnn": build.get("cudnn_version"), "gpus": gpus}


def horovod_info(framework: str = "torch") -> dict[str, Any]:
    import importlib

    hvd = importlib.import_module(f"horovod.{framework}")
    import horovod

    return {"version": horovod.__version__, "mpi_built": bool(hvd.mpi_built()),
            "gloo_built": bool(hvd.gloo_built()), "nccl_built": bool(hvd.nccl_built())}


INFO = {"torch": torch_info, "tensorflow": tf_info}


def framework_record(framework: str) -> dict[str, Any]:
    """One framework as this process sees it after importing it and Horovod's module for it: its
    interpreter and environment, versions, Horovod's build, and the libraries the two loaded."""
    part: dict[str, Any] = {"python": sys.executable, "prefix": os.path.realpath(sys.prefix),
                            framework: INFO[framework](), **horovod_part(framework)}
    return {**part, "loaded_libraries": loaded_libraries()}  # after the imports above


def horovod_part(framework: str) -> dict[str, Any]:
    """``{"horovod": its build}`` where Horovod is installed (its error where its module for ``framework`` does
    not load), else nothing."""
    import importlib.util

    if not importlib.util.find_spec("horovod"):
        return {}
    try:
        return {"horovod": horovod_info(framework)}
    except ImportError as exc:
        return {"horovod": {"error": str(exc)}}


PROBE = ("import json, sys; from bench.records.env import framework_record; "
         "json.dump(framework_record(sys.argv[1]), sys.stdout)")


def framework_elsewhere(framework: str, python: str) -> dict[str, Any]:
    """:func:`framework_record` from the interpreter of the environment that holds ``framework``."""
    try:
        out = subprocess.run([python, "-c", PROBE, framework], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"python": python, "error": str(exc)}
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return {"python": python, "error": lines[-1] if lines else f"exit {out.returncode}"}
    return json.loads(out.stdout)


def full() -> dict[str, Any]:
    """Everything importable here (``bench env``); importing the frameworks loads their libraries. Where the
    frameworks live in separate environments (bench.launching.envs), each is probed by its own interpreter, and
    ``environments`` holds one record per framework, loaded libraries included."""
    import importlib.util

    record = base()
    if envs.split():
        parts = {}
        for framework in FRAMEWORKS:
            python = envs.interpreter(framework)
            parts[framework] = framework_elsewhere(framework, python) if python else framework_record(framework)
        found = {framework: part[framework] for framework, part in parts.items() if framework in part}
        return {**record, "environments": parts, **found, "topology": topology()}
    found = {framework: INFO[framework]() for framework in FRAMEWORKS if importlib.util.find_spec(framework)}
    record = {**record, **found, **horovod_part("torch"), "topology": topology()}
    return {**record, "loaded_libraries": loaded_libraries()}  # after the imports above


def library_lines(record: dict[str, Any]) -> list[str]:
    """The NCCL, CUDA runtime and MPI files each framework's process mapped, one ``name lib path`` line each
    (what ``bench env --check`` prints, and the CUDA image's self-test leaves in the build log)."""
    parts = record.get("environments") or {"this process": {"loaded_libraries": record.get("loaded_libraries")}}
    return [f"{name} {lib} {path}" for name, part in parts.items()
            for lib, paths in sorted((part.get("loaded_libraries") or {}).items()) for path in paths]


def library_problems(record: dict[str, Any]) -> list[str]:
    """What ``bench env --check`` fails on: a process holding two NCCLs or two CUDA runtimes, or one loaded
    from outside that process's own environment (another framework's wheels, a system copy); in the CUDA
    image also a process holding none (the framework's own was not found)."""
    parts = record.get("environments") or {
        "this process": {"prefix": os.path.realpath(sys.prefix), "loaded_libraries": record.get("loaded_libraries")}}
    cuda_image = (record.get("image") or {}).get("flavor") == "cuda"
    problems = []
    for name, part in parts.items():
        if "error" in part:
            problems.append(f"{name}: {part['error']}")
            continue
        libs = part.get("loaded_libraries") or {}
        for lib in ("nccl", "cudart"):
            paths = libs.get(lib, [])
            if len(paths) > 1:
                problems.append(f"{name}: {len(paths)} {lib} libraries in one process: {', '.join(paths)}")
            elif not paths and cuda_image:
                problems.append(f"{name}: no {lib} loaded (the framework's own was expected)")
            problems += [f"{name}: {lib} from outside its environment {part['prefix']}: {p}" for p in paths
                         if not p.startswith(part["prefix"].rstrip("/") + "/")]
    return problems
