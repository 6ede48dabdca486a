"""The image's side of each Kubernetes contract, for real (make test-k8s): containers of the CPU image started as
the operators would start the pods of the manifests bench k8s renders (docs/kubernetes.md).

No control plane can be installed here, so this file plays the operators' part, from their sources
(k8s/crds/README.md names the releases):

* MPI Operator v2 (pkg/controller/mpi_job_controller.go): an ECDSA P-521 key pair in PEM, mounted as the job's
  Secret (root's files, mode 0644) at sshAuthMountPath as id_rsa, id_rsa.pub and authorized_keys; the hostfile
  ``<job>-worker-<i>.<job>.<namespace>.svc slots=<slotsPerWorker>`` at /etc/mpi/hostfile on the launcher; the
  launcher's OMPI_MCA_orte_* and plm_rsh_args environment, K_MPI_JOB_ROLE, and the NVIDIA variables emptied; pod
  host names ``<job>-worker-<i>`` and ``<job>-launcher`` in the subdomain ``<job>``; the launcher starts once the
  workers are ready (launcherCreationPolicy WaitForWorkersReady: their sshd accepts connections).
* Kubeflow Trainer's torch plugin (pkg/runtime/framework/plugins/torch/torch.go): PET_NNODES, PET_NPROC_PER_NODE,
  PET_NODE_RANK (the Job completion index), PET_MASTER_ADDR ``<job>-node-0-0.<job>`` and PET_MASTER_PORT 29500
  in each pod ``<job>-node-0-<i>``, with the runtime patch's volumes and security context.
* An Indexed Job: pods ``<job>-<i>`` with JOB_COMPLETION_INDEX, in the headless Service's subdomain; the second
  pod starts a few seconds after the first, as a scheduler may place them.

Every container runs as the manifest's user (uid 1000, with fsGroup's group on the results volume), on one
network where each pod's name resolves as Kubernetes' DNS would resolve it. Every run must show both pods' hosts
and pass the ranks-in-sync check.
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import SMALL, assert_valid_run, built_image, only_result, run_container
from tools import images, k8s_check

pytestmark = pytest.mark.kubernetes

IMAGE = os.environ.get("HVDBENCH_TEST_IMAGE", "hvdbench:current-cpu")
NAMESPACE = "default"
RUN = [*SMALL, "--no-telemetry"]


@pytest.fixture(scope="module")
def dk():
    return built_image(IMAGE, "image")


@pytest.fixture
def cluster(dk, tmp_path):
    """A network for the pods, a results volume, and every container removed at the end."""
    network = dk.networks.create(f"hvdbench-k8s-{os.getpid()}-{tmp_path.name[-12:]}")
    results = tmp_path / "results"
    results.mkdir()
    started = []
    yield dk, network, results, started
    for container in started:
        container.remove(force=True)
    network.remove()


def render(mode: str, *more: str) -> list[dict]:
    from typer.testing import CliRunner

    from bench.cli import app

    r = CliRunner().invoke(app, ["k8s", mode, "--image", IMAGE, "--nodes", "2", "--gpus-per-node", "0", *RUN, *more])
    assert r.exit_code == 0, r.output
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def start_pod(cluster, name: str, subdomain: str, podspec: dict, container: dict, env: dict[str, str],
              mounts: dict[str, str] | None = None):
    """Start ``container`` of ``podspec`` as the pod ``name`` in ``subdomain``: its command, args, env, user and
    volume mounts as the kubelet would; ``mounts`` adds what the operator mounts (host path -> container path)."""
    dk, network, results, started = cluster
    security = podspec.get("securityContext", {})
    # the checkout's bench/ over the image's, as in every run of the gate (tests/conftest.py run_container)
    volumes = [f"{host}:{path}:ro" for host, path in (mounts or {}).items()] + images.bench_binds(container["image"])
    shm = "64m"
    claims = {v["name"]: v for v in podspec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        volume = claims[mount["name"]]
        if "persistentVolumeClaim" in volume:  # the results claim: group fsGroup, group-writable
            os.chown(results, 0, security["fsGroup"])
            results.chmod(0o2775)
            volumes.append(f"{results}:{mount['mountPath']}:rw")
        elif volume.get("emptyDir", {}).get("medium") == "Memory" and mount["mountPath"] == "/dev/shm":
            shm = volume["emptyDir"]["sizeLimit"].replace("Gi", "g")
    aliases = [name, f"{name}.{subdomain}", f"{name}.{subdomain}.{NAMESPACE}.svc",
               f"{name}.{subdomain}.{NAMESPACE}.svc.cluster.local"]
    pod = dk.containers.create(
        container["image"], container.get("args"), entrypoint=container.get("command"), hostname=name, name=None,
        user=f"{security['runAsUser']}:{security['runAsGroup']}", group_add=[str(security["fsGroup"])],
        environment={**{e["name"]: e["value"] for e in container.get("env", [])}, **env}, volumes=volumes,
        shm_size=shm, network=network.name,
        networking_config={network.name: dk.api.create_endpoint_config(aliases=aliases)})
    started.append(pod)
    pod.start()
    return pod


def finish(pod, timeout: int = 600) -> str:
    code = pod.wait(timeout=timeout)["StatusCode"]
    logs = pod.logs().decode(errors="replace")
    assert code == 0, f"{pod.name} exited {code}:\n{logs[-4000:]}"
    return logs


def assert_both_hosts(results: Path, job: str, mode: str, launcher: str, hosts: set[str]) -> dict:
    result = only_result(results / job)
    assert_valid_run(result, mode, 2, launcher)  # includes the ranks-in-sync check
    assert {r["host"] for r in result["environment"]["ranks"]} == hosts
    print(json.dumps({"mode": mode, "hosts": sorted(hosts), "samples_per_sec_total":
                      result["summary"]["samples_per_sec_total"]}))
    return result


def ssh_keys(where: Path) -> Path:
    """The job's Secret as the MPI Operator makes and mounts it."""
    where.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "", "-C", "",
                    "-f", str(where / "id_rsa")], check=True)
    (where / "authorized_keys").write_bytes((where / "id_rsa.pub").read_bytes())
    for f in where.iterdir():
        f.chmod(0o644)
    assert (where / "id_rsa").read_text().startswith("-----BEGIN EC PRIVATE KEY-----")
    return where


@pytest.mark.parametrize("mode", ["tf-horovod", "torch-horovod"])
def test_mpijob_launcher_runs_mpirun_across_two_worker_pods(cluster, tmp_path, mode):
    (job,) = render(mode)
    name, spec = job["metadata"]["name"], job["spec"]
    keys = ssh_keys(tmp_path / "ssh")
    workers = spec["mpiReplicaSpecs"]["Worker"]
    hosts = [f"{name}-worker-{i}" for i in range(workers["replicas"])]
    config = tmp_path / "mpi"
    config.mkdir()
    (config / "hostfile").write_text("".join(f"{h}.{name}.{NAMESPACE}.svc slots={spec['slotsPerWorker']}\n"
                                             for h in hosts))
    secret = {keys: spec["sshAuthMountPath"]}
    worker_spec = workers["template"]["spec"]
    pods = [start_pod(cluster, h, name, worker_spec, worker_spec["containers"][0], {"K_MPI_JOB_ROLE": "worker"},
                      secret) for h in hosts]
    deadline = time.monotonic() + 300  # a deadlock guard: sshd listens within seconds on an idle machine
    for worker in pods:  # WaitForWorkersReady: the readiness probe, a TCP connection to sshd's port
        port = worker_spec["containers"][0]["readinessProbe"]["tcpSocket"]["port"]
        while worker.exec_run(["bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"]).exit_code != 0:
            worker.reload()
            assert worker.status == "running" and time.monotonic() < deadline, worker.logs().decode()[-2000:]
            time.sleep(0.5)
        # sshd runs as the pod's user, not root
        assert {uid.strip() for _, uid, command in worker.top(ps_args="-o pid,uid,comm")["Processes"]
                if command == "sshd"} == {"1000"}

    launcher_spec = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    operator_env = {"K_MPI_JOB_ROLE": "launcher", "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                    "OMPI_MCA_orte_set_default_slots": str(spec["slotsPerWorker"]),
                    "NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
    launcher = start_pod(cluster, f"{name}-launcher", name, launcher_spec, launcher_spec["containers"][0],
                         operator_env, {**secret, config: "/etc/mpi"})
    finish(launcher)
    assert_both_hosts(cluster[2], name, mode, "mpirun", set(hosts))


@pytest.mark.smoke
def test_trainjob_torchrun_in_two_node_pods(cluster):
    (job,) = render("torch-ddp")
    name, trainer = job["metadata"]["name"], job["spec"]["trainer"]
    (patch,) = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    podspec = patch["template"]["spec"]["template"]["spec"]
    container = {"name": "node", "image": trainer["image"], "command": trainer["command"],
                 "args": trainer["args"], "env": trainer.get("env", []),
                 "volumeMounts": podspec["containers"][0]["volumeMounts"]}
    hosts = [f"{name}-node-0-{i}" for i in range(trainer["numNodes"])]
    pods = [start_pod(cluster, h, name, podspec, container, {
        "PET_NNODES": str(trainer["numNodes"]), "PET_NPROC_PER_NODE": str(trainer["numProcPerNode"]),
        "PET_NODE_RANK": str(i), "JOB_COMPLETION_INDEX": str(i), "PET_MASTER_ADDR": f"{name}-node-0-0.{name}",
        "PET_MASTER_PORT": "29500"}) for i, h in enumerate(hosts)]
    for p in pods:
        finish(p)
    assert_both_hosts(cluster[2], name, "torch-ddp", "torchrun", set(hosts))


def test_indexed_job_pods_build_tf_config_from_their_names(cluster):
    service, job = render("tf-native")
    name, spec = job["metadata"]["name"], job["spec"]
    podspec = spec["template"]["spec"]
    hosts = [f"{name}-{i}" for i in range(spec["completions"])]
    pods = []
    for i, h in enumerate(hosts):  # the second pod comes later: the first waits for its name
        pods.append(start_pod(cluster, h, podspec["subdomain"], podspec, podspec["containers"][0],
                              {"JOB_COMPLETION_INDEX": str(i)}))
        time.sleep(5)
    logs = [finish(p) for p in pods]
    result = assert_both_hosts(cluster[2], name, "tf-native", "tf-config", set(hosts))
    assert result["config"]["strategy"] == "multiworker"
    assert "result:" in logs[0]  # rank 0 (pod 0) wrote it


def test_the_image_renders_manifests_that_validate(dk):
    """docker run IMAGE k8s ...: the image has what bench k8s needs (PyYAML through Horovod)."""
    code, out = run_container(dk, IMAGE, ["k8s", "tf-horovod", "--image", IMAGE, "--gpus-per-node", "2"],
                              stdout_only=True)
    assert code == 0, out
    assert k8s_check.check_text(out, "from the image") == []
    assert out.startswith("# Rendered by hvdbench 0.1.0: bench k8s tf-horovod --image")
