"""``bench k8s``: the Kubernetes manifests of a run, as the standard operators run distributed training.

============================  ===========================================================================
mode                          workload (what must be installed on the cluster: docs/kubernetes.md)
============================  ===========================================================================
Horovod (tf-, torch-horovod)  MPIJob, kubeflow.org/v2beta1 (Kubeflow MPI Operator): a launcher pod runs
                              ``mpirun`` over SSH into the worker pods, one per node
PyTorch's own (torch-ddp,     TrainJob, trainer.kubeflow.org/v1alpha1 (Kubeflow Trainer) on the stock
torch-hybrid)                 ``torch-distributed`` runtime: torchrun in every node's pod
TensorFlow's own (tf-native   an Indexed Job (batch/v1) and a headless Service: one worker pod per device,
multiworker)                  each building TF_CONFIG from its stable name (bench.launching.k8s_pod)
============================  ===========================================================================

Every pod mounts the results claim at /results (bench writes to /results/<name>), with ``--data-claim`` a dataset's
claim read-only at /data (the run reads it: ``--data /data``), a memory-backed /dev/shm
(NCCL between local GPUs), asks the device plugin for ``nvidia.com/gpu`` when the run has GPUs, and runs as the
image's non-root user (uid 1000) with fsGroup 1000, so the claim is writable. ``--env NAME=VALUE`` sets the
network settings in every pod (and mpirun forwards them with ``-x``). The run options are the mode command's,
checked here as they would be at the start of the run, and written back as the flags that give the same
configuration.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from bench import __version__
from bench.config import RunConfig, command_line, option
from bench.data.loaders import loader as loader_named
from bench.errors import BenchError
from bench.launching import k8s_pod as pod
from bench.modes import MODES
from bench.modes import mode as mode_spec
from bench.vocabulary import Device

USER = 1000  # the image's non-root user (mpiuser): docker/mpijob-ssh.sh
SSH_DIR = "/home/mpiuser/.ssh"  # where the MPI Operator mounts the job's SSH keys (sshAuthMountPath)
SSHD_CONFIG = "/home/mpiuser/.sshd_config"  # the worker's sshd, as that user
SSH_PORT = 2222  # a non-root sshd's port; the image's ssh client uses it for every host
RESULTS = "/results"
DATA = "/data"
NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
# Set by the operators or by bench k8s itself; a user's --env must not change them.
RESERVED = re.compile(r"^(PET_.*|OMPI_MCA_orte_.*|K_MPI_JOB_ROLE|TF_CONFIG|JOB_COMPLETION_INDEX|HVDBENCH_TF_.*|"
                      r"MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK)$")
MAX_NAME = 40  # the longest pod name made from it (<name>-worker-<i>, <name>-node-0-<i>) stays a DNS label
API_VERSIONS = {"MPIJob": "kubeflow.org/v2beta1", "TrainJob": "trainer.kubeflow.org/v1alpha1",
                "Job": "batch/v1", "Service": "v1"}


@dataclass(frozen=True)
class K8sJob:
    """The job bench k8s describes, resolved from its flags (K8sConfig): the run, and where it runs and on what."""
    run: RunConfig
    image: str
    nodes: int = 2
    gpus_per_node: int = 0  # 0: a CPU run, one rank per pod
    name: str | None = None  # default hvdbench-<mode>
    namespace: str = "default"
    results_claim: str = "hvdbench-results"
    shm_size: str | None = None  # default 2Gi per GPU, 1Gi on CPU
    env: tuple[tuple[str, str], ...] = ()
    data_claim: str | None = None  # a PersistentVolumeClaim holding the dataset, mounted read-only at DATA
    loader: tuple[str, ...] = ()  # with data_claim: the run's --loader / --loader-workers flags, passed on

    def __post_init__(self) -> None:
        run = self.run
        if self.loader and not self.data_claim:
            raise BenchError("--loader and --loader-workers apply to runs with --data-claim")
        if workload(run.mode) is None:
            raise BenchError(f"bench k8s: {run.mode} has no Kubernetes workload (Horovod modes run as an MPIJob, "
                             "torch-ddp and torch-hybrid as a TrainJob, tf-native multiworker as an indexed Job)")
        if run.mode == "tf-native" and (run.strategy or "multiworker") != "multiworker":
            raise BenchError("bench k8s: tf-native runs its multiworker strategy on Kubernetes (one worker per pod)")
        if run.np is not None:
            raise BenchError("bench k8s sets the ranks from --nodes and --gpus-per-node; leave out --np")
        if run.output != "results":
            raise BenchError(f"bench k8s writes results to the claim --results-claim mounts at {RESULTS}; "
                             "leave out --output")
        if run.device != Device.auto:
            raise BenchError("bench k8s sets the device from --gpus-per-node (0: cpu); leave out --device")
        if not self.image or any(c.isspace() for c in self.image):
            raise BenchError(f"--image must name an image (got {self.image!r})")
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise BenchError("--nodes must be at least 1 and --gpus-per-node at least 0")
        for what, value in (("--name", self.name or self.job_name), ("--namespace", self.namespace),
                            ("--results-claim", self.results_claim),
                            *((("--data-claim", self.data_claim),) if self.data_claim is not None else ())):
            if not NAME.match(value) or len(value) > (MAX_NAME if what == "--name" else 63):
                raise BenchError(f"{what} {value!r} must be a DNS label: lowercase letters, digits and '-' "
                                 f"(at most {MAX_NAME if what == '--name' else 63} characters)")
        if self.shm_size is not None and not QUANTITY.match(self.shm_size):
            raise BenchError(f"--shm-size {self.shm_size!r} is not a Kubernetes quantity (e.g. 16Gi)")
        for key, _ in self.env:
            if not ENV_NAME.match(key):
                raise BenchError(f"--env {key!r} is not an environment variable name")
            if RESERVED.match(key):
                raise BenchError(f"--env {key}: set by the operator or by bench k8s itself")

    @property
    def job_name(self) -> str:
        return self.name or f"hvdbench-{self.run.mode}"

    @property
    def ranks_per_node(self) -> int:
        return self.gpus_per_node or 1

    @property
    def shm(self) -> str:
        return self.shm_size or (f"{2 * self.gpus_per_node}Gi" if self.gpus_per_node else "1Gi")

    def bench_args(self) -> list[str]:
        """The mode command and its flags, as every rank runs it."""
        device = Device.cuda if self.gpus_per_node else Device.cpu
        args = command_line(RunConfig(**{**self.run.to_dict(), "device": device,
                                         "output": f"{RESULTS}/{self.job_name}"}))
        return args + (["--data", DATA, *self.loader] if self.data_claim else [])

    @property
    def mounts(self) -> list[dict[str, Any]]:
        return MOUNTS + ([{"name": "data", "mountPath": DATA, "readOnly": True}] if self.data_claim else [])


def workload(mode: str) -> str | None:
    """The Kubernetes workload that runs ``mode``'s ranks: 'MPIJob', 'TrainJob', 'Job', or None."""
    spec = mode_spec(mode)
    if spec.horovod:
        return "MPIJob"
    if spec.library == "native":
        return {"torch": "TrainJob", "tensorflow": "Job"}.get(spec.framework)
    return None


def _meta(cfg: K8sJob, kind: str, name: str | None = None) -> dict[str, Any]:
    return {"apiVersion": API_VERSIONS[kind], "kind": kind,
            "metadata": {"name": name or cfg.job_name, "namespace": cfg.namespace, "labels": _labels(cfg)}}


def _labels(cfg: K8sJob) -> dict[str, str]:
    return {"app.kubernetes.io/name": "hvdbench", "app.kubernetes.io/instance": cfg.job_name,
            "app.kubernetes.io/component": cfg.run.mode, "app.kubernetes.io/version": __version__}


def _env(cfg: K8sJob, **more: str) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in (*more.items(), *cfg.env)]


def _gpus(cfg: K8sJob, per_pod: int) -> dict[str, Any]:
    return {"limits": {"nvidia.com/gpu": per_pod}} if per_pod else {}


def _volumes(cfg: K8sJob) -> list[dict[str, Any]]:
    data = [{"name": "data", "persistentVolumeClaim": {"claimName": cfg.data_claim, "readOnly": True}}] \
        if cfg.data_claim else []
    return [{"name": "results", "persistentVolumeClaim": {"claimName": cfg.results_claim}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": cfg.shm}}, *data]


MOUNTS = [{"name": "results", "mountPath": RESULTS}, {"name": "shm", "mountPath": "/dev/shm"}]
SECURITY = {"runAsUser": USER, "runAsGroup": USER, "fsGroup": USER}


def _container(name: str, image: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **{k: v for k, v in fields.items() if v not in (None, {}, [])}}


def mpijob(cfg: K8sJob) -> list[dict[str, Any]]:
    """Kubeflow MPI Operator v2: workers run the image's sshd as uid 1000 on SSH_PORT with the job's keys where
    sshAuthMountPath puts them; the launcher, once every worker is ready, runs mpirun on the hostfile and
    OMPI_MCA_* environment the operator gives it."""
    ranks = cfg.nodes * cfg.ranks_per_node
    forward = [arg for key, _ in cfg.env for arg in ("-x", key)]
    launcher = _container("launcher", cfg.image, command=["mpirun"],
                          args=["-np", str(ranks), "--bind-to", "none", "--map-by", "slot", *forward,
                                "bench", *cfg.bench_args()], env=_env(cfg))
    worker = _container("worker", cfg.image, command=["/usr/sbin/sshd"], args=["-De", "-f", SSHD_CONFIG],
                        env=_env(cfg), ports=[{"name": "ssh", "containerPort": SSH_PORT}],
                        readinessProbe={"tcpSocket": {"port": SSH_PORT}, "periodSeconds": 2},
                        resources=_gpus(cfg, cfg.gpus_per_node), volumeMounts=cfg.mounts)
    job = _meta(cfg, "MPIJob")
    job["spec"] = {
        "slotsPerWorker": cfg.ranks_per_node,
        "mpiImplementation": "OpenMPI",
        "sshAuthMountPath": SSH_DIR,
        "launcherCreationPolicy": "WaitForWorkersReady",
        "runPolicy": {"cleanPodPolicy": "Running", "backoffLimit": 0, "ttlSecondsAfterFinished": 86400},
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": "Never",
                         "template": {"metadata": {"labels": _labels(cfg)},
                                      "spec": {"securityContext": SECURITY, "containers": [launcher]}}},
            "Worker": {"replicas": cfg.nodes, "restartPolicy": "Never",
                       "template": {"metadata": {"labels": _labels(cfg)},
                                    "spec": {"securityContext": SECURITY, "containers": [worker],
                                             "volumes": _volumes(cfg)}}},
        },
    }
    return [job]


def trainjob(cfg: K8sJob) -> list[dict[str, Any]]:
    """Kubeflow Trainer: the torch-distributed runtime's torch plugin sets PET_NNODES, PET_NPROC_PER_NODE,
    PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT in each node's container, which torchrun reads."""
    trainer: dict[str, Any] = {"image": cfg.image, "command": ["torchrun"],
                               "args": ["--no-python", "bench", *cfg.bench_args()],
                               "numNodes": cfg.nodes, "numProcPerNode": cfg.ranks_per_node}
    if cfg.gpus_per_node:
        trainer["resourcesPerNode"] = _gpus(cfg, cfg.gpus_per_node)
    if cfg.env:
        trainer["env"] = _env(cfg)
    pod_patch = {"securityContext": SECURITY, "volumes": _volumes(cfg),
                 "containers": [{"name": "node", "volumeMounts": cfg.mounts}]}
    job = _meta(cfg, "TrainJob")
    job["spec"] = {
        "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                       "name": "torch-distributed"},
        "trainer": trainer,
        "runtimePatches": [{"manager": "hvdbench", "trainingRuntimeSpec": {"template": {"spec": {
            "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": pod_patch}}}}]}}}}],
    }
    return [job]


def indexed_job(cfg: K8sJob) -> list[dict[str, Any]]:
    """tf-native multiworker: one pod per device, named <name>-<index> by the Indexed Job, resolvable through
    the headless Service (even before it is ready, so workers find each other while they start)."""
    workers = cfg.nodes * cfg.ranks_per_node
    service = _meta(cfg, "Service")
    service["spec"] = {"clusterIP": "None", "publishNotReadyAddresses": True,
                       "selector": {"app.kubernetes.io/instance": cfg.job_name},
                       "ports": [{"name": "grpc", "port": pod.DEFAULT_PORT}]}
    worker = _container("worker", cfg.image, args=cfg.bench_args(),
                        env=_env(cfg, **{pod.WORKERS_ENV: str(workers), pod.SUBDOMAIN_ENV: cfg.job_name,
                                         pod.PORT_ENV: str(pod.DEFAULT_PORT)}),
                        ports=[{"name": "grpc", "containerPort": pod.DEFAULT_PORT}],
                        resources=_gpus(cfg, 1 if cfg.gpus_per_node else 0), volumeMounts=cfg.mounts)
    job = _meta(cfg, "Job")
    job["spec"] = {
        "completionMode": "Indexed", "completions": workers, "parallelism": workers,
        "backoffLimit": 0, "ttlSecondsAfterFinished": 86400,
        "template": {"metadata": {"labels": _labels(cfg)},
                     "spec": {"subdomain": cfg.job_name, "restartPolicy": "Never", "securityContext": SECURITY,
                              "containers": [worker], "volumes": _volumes(cfg)}},
    }
    return [service, job]


RENDERERS = {"MPIJob": mpijob, "TrainJob": trainjob, "Job": indexed_job}


def manifests(cfg: K8sJob) -> list[dict[str, Any]]:
    """Every object of the run, in the order to apply them."""
    return RENDERERS[workload(cfg.run.mode)](cfg)


def render(cfg: K8sJob, command: str) -> str:
    """The manifests as one YAML stream, headed by the command that makes them again."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # every object spelled out: no &id001 anchors
            return True

    head = f"# Rendered by hvdbench {__version__}: {command}\n# docs/kubernetes.md says what the cluster needs.\n"
    return head + "---\n".join(yaml.dump(doc, Dumper=Dumper, sort_keys=False, width=120) for doc in manifests(cfg))


@dataclass(frozen=True)
class K8sConfig:
    """bench k8s's own options, declared once; ``run``: the mode command's run options as given (bench.cli)."""
    mode: str = option("", "The mode to run: a Horovod mode (MPIJob), torch-ddp or torch-hybrid (TrainJob), "
                       "tf-native (indexed Job).", argument=True)
    image: str = option("", "The image every pod runs (a published hvdbench image, docs/images.md).")
    nodes: int = option(2, "Nodes (pods of ranks; tf-native: one pod per device).")
    gpus_per_node: int = option(0, "GPUs per node, one rank each (0: a CPU run, one rank per node).")
    name: str | None = option(None, "The job's name (default hvdbench-MODE).")
    namespace: str = option("default", "The namespace it runs in.")
    results_claim: str = option("hvdbench-results", "A PersistentVolumeClaim (ReadWriteMany) mounted at /results; "
                                "results go to /results/NAME.")
    shm_size: str | None = option(None, "/dev/shm per pod (default 2Gi per GPU, 1Gi on CPU).")
    env_vars: list[str] | None = option(None, "NAME=VALUE in every pod (e.g. NCCL_SOCKET_IFNAME=eth0); repeat it.",
                                        flag="--env")
    data_claim: str | None = option(None, "A PersistentVolumeClaim holding a dataset: mounted read-only at /data in "
                                    "every pod, and the run reads it (--data /data; docs/data.md).")
    run: dict[str, Any] = field(default_factory=dict)  # RunConfig's keyword arguments (bench.cli)

    def job(self) -> K8sJob:
        """The job the manifests describe: the run checked as it would be at its start, where it can be here."""
        if self.mode not in MODES:
            raise BenchError(f"unknown mode '{self.mode}' (choose from {', '.join(MODES)})")
        if not self.image:
            raise BenchError("bench k8s needs --image: the image every pod runs (docs/images.md)")
        pairs = []
        for item in self.env_vars or []:
            key, sep, value = item.partition("=")
            if not sep:
                raise BenchError(f"--env takes NAME=VALUE (got {item!r})")
            pairs.append((key, value))
        arguments = dict(self.run)
        if arguments.get("data") is not None:  # a path in the pods, not here: the run checks it there
            raise BenchError(f"bench k8s: the pods read the dataset from --data-claim, mounted at {DATA}; leave "
                             "out --data")
        loader = []  # checked by the run in the pods, where the dataset is: passed on as flags
        for key in ("loader", "loader_workers"):
            if arguments.get(key) is not None:
                loader += [f"--{key.replace('_', '-')}", str(arguments.pop(key))]
        if "--loader" in loader:
            name = loader[loader.index("--loader") + 1]
            framework = MODES[self.mode].framework
            if loader_named(name).framework not in (framework, "any"):
                raise BenchError(f"--loader {name} feeds {loader_named(name).framework}; {self.mode} is {framework}")
        return K8sJob(run=RunConfig(mode=self.mode, **arguments), image=self.image, nodes=self.nodes,
                         gpus_per_node=self.gpus_per_node, name=self.name, namespace=self.namespace,
                         results_claim=self.results_claim, shm_size=self.shm_size, env=tuple(pairs),
                         data_claim=self.data_claim, loader=tuple(loader))


def main(cfg: K8sConfig) -> int:
    """bench k8s: print the manifests (kubectl apply -f - reads them), headed by the command that made them."""
    print(render(cfg.job(), shlex.join(["bench", *sys.argv[1:]])), end="")
    return 0
