"""A pod of the tf-native indexed Job (k8s/, docs/kubernetes.md): TF_CONFIG from the pod's stable name.

Kubernetes names the pods of an Indexed Job ``<job>-<index>`` (their host name) and sets JOB_COMPLETION_INDEX
in each; with the pod's ``subdomain`` set to a headless Service, every pod resolves as ``<job>-<i>.<service>``.
The manifest (bench k8s) adds how many workers there are and the service, so each pod can name them all:

==========================  ===============================================================
HVDBENCH_TF_WORKERS         the Job's completions: one MultiWorkerMirroredStrategy worker per pod
HVDBENCH_TF_SUBDOMAIN       the headless Service the pods' ``subdomain`` names
HVDBENCH_TF_PORT            the port every worker's gRPC server listens on (default 2222)
JOB_COMPLETION_INDEX        set by Kubernetes: this pod's index, its task index in TF_CONFIG
==========================  ===============================================================

Pods start when the scheduler places them, not together: a pod waits (up to the run's rendezvous timeout)
until every worker's name resolves, then TensorFlow's own rendezvous takes over.
"""

from __future__ import annotations

import json
import socket
import time

from bench.errors import BenchError
from bench.launching.detect import resolve_error

WORKERS_ENV = "HVDBENCH_TF_WORKERS"
SUBDOMAIN_ENV = "HVDBENCH_TF_SUBDOMAIN"
PORT_ENV = "HVDBENCH_TF_PORT"
INDEX_ENV = "JOB_COMPLETION_INDEX"
DEFAULT_PORT = 2222


def _number(env: dict[str, str], name: str, low: int, high: int | None = None) -> int:
    value = env.get(name, "")
    if not value.isdigit() or int(value) < low or (high is not None and int(value) > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise BenchError(f"malformed indexed-Job environment: {name}={value!r} must be an integer {bound}")
    return int(value)


def pod_tf_config(env: dict[str, str], hostname: str | None = None) -> str | None:
    """TF_CONFIG for this pod of the tf-native indexed Job, or None when this is not such a pod (no
    HVDBENCH_TF_WORKERS) or TF_CONFIG is given already."""
    if WORKERS_ENV not in env or "TF_CONFIG" in env:
        return None
    workers = _number(env, WORKERS_ENV, 1)
    index = _number(env, INDEX_ENV, 0, workers - 1)
    port = _number(env, PORT_ENV, 1, 65535) if PORT_ENV in env else DEFAULT_PORT
    subdomain = env.get(SUBDOMAIN_ENV, "")
    if not subdomain:
        raise BenchError(f"malformed indexed-Job environment: {SUBDOMAIN_ENV} (the headless Service) is not set")
    hostname = (hostname or socket.gethostname()).split(".")[0]
    job, _, own = hostname.rpartition("-")
    if not job or own != str(index):
        raise BenchError(f"this pod's host name {hostname!r} is not '<job>-{index}' ({INDEX_ENV}={index}): "
                         "TF_CONFIG is built from an Indexed Job's pod names (completionMode: Indexed)")
    cluster = {"worker": [f"{job}-{i}.{subdomain}:{port}" for i in range(workers)]}
    return json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})


def wait_resolvable(tf_config: str, timeout_s: float, poll_s: float = 1.0) -> None:
    """Wait until every worker's name in ``tf_config`` resolves (the pods start one by one, and a pod's
    name resolves only once it runs); one clear line naming those that never did."""
    hosts = [address.rpartition(":")[0] for address in json.loads(tf_config)["cluster"]["worker"]]
    deadline = time.monotonic() + timeout_s
    while True:
        missing = {host: why for host in hosts if (why := resolve_error(host))}
        if not missing:
            return
        if time.monotonic() >= deadline:
            names = ", ".join(f"{host} ({why})" for host, why in missing.items())
            raise BenchError(f"indexed-Job workers did not resolve within {timeout_s:.0f} s: {names}. Is the "
                             "headless Service there, with publishNotReadyAddresses, and every pod scheduled?")
        time.sleep(poll_s)
