"""bench k8s offline: every manifest it renders validates against the Kubernetes schemas and the operators' CRDs
(tools/k8s_check.py), runs the command lines docs/kubernetes.md promises, and bad input is one line. The pods'
side of each contract runs for real in tests/system/test_kubernetes_pods.py."""

import json
import shlex

import pytest
import yaml

from bench.commands.kubernetes import K8sJob, manifests, workload
from bench.config import RunConfig, command_line
from bench.errors import BenchError
from bench.launching import k8s_pod as pod
from bench.launching.detect import detect
from tests.conftest import ROOT
from tools import k8s_check

IMAGE = "registry.example.com/hvdbench:current-cuda"
EXAMPLES = sorted((ROOT / "k8s" / "examples").glob("*.yaml"))
MODES = ["tf-horovod", "torch-horovod", "torch-ddp", "torch-hybrid", "tf-native"]


def rendered(cli, *args: str) -> list[dict]:
    r = cli("k8s", *args)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"# Rendered by hvdbench 0.1.0: bench k8s {shlex.join(args)}\n")
    assert not k8s_check.check_text(r.stdout, "rendered"), k8s_check.check_text(r.stdout, "rendered")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.mark.parametrize("gpus", [0, 8])
@pytest.mark.parametrize("mode", MODES)
def test_every_mode_renders_manifests_that_validate(cli, mode, gpus):
    model = ["--model", "transformer-small"] if mode == "torch-hybrid" else ["--model", "resnet50"]
    docs = rendered(cli, mode, "--image", IMAGE, "--nodes", "3", "--gpus-per-node", str(gpus), *model,
                    "--env", "NCCL_SOCKET_IFNAME=eth0")
    assert [d["kind"] for d in docs] == (["Service", "Job"] if mode == "tf-native" else [workload(mode)])
    text = json.dumps(docs)
    assert "NCCL_SOCKET_IFNAME" in text and '"claimName": "hvdbench-results"' in text
    assert ('"nvidia.com/gpu"' in text) == bool(gpus)


@pytest.mark.parametrize("mode", ["tf-horovod", "torch-ddp"])
def test_a_data_claim_is_mounted_read_only_in_every_pod_and_read_by_the_run(cli, mode):
    docs = rendered(cli, mode, "--image", IMAGE, "--data-claim", "imagenet", "--loader-workers", "6", "--model",
                    "resnet50")
    text = json.dumps(docs)
    assert '"claimName": "imagenet", "readOnly": true' in text
    assert '{"name": "data", "mountPath": "/data", "readOnly": true}' in text
    assert '"--data", "/data", "--loader-workers", "6"' in text


def test_the_mpijob_runs_mpirun_over_the_workers_sshd(cli):
    (job,) = rendered(cli, "tf-horovod", "--image", IMAGE, "--nodes", "2", "--gpus-per-node", "4", "--model",
                      "vgg16", "--batch-size", "64", "--precision", "amp-fp16", "--env", "NCCL_DEBUG=INFO")
    spec = job["spec"]
    assert spec["slotsPerWorker"] == 4 and spec["sshAuthMountPath"] == "/home/mpiuser/.ssh"
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    launcher = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert [*launcher["command"], *launcher["args"]] == [
        "mpirun", "-np", "8", "--bind-to", "none", "--map-by", "slot", "-x", "NCCL_DEBUG", "bench", "tf-horovod",
        "--batch-size", "64", "--precision", "amp-fp16", "--device", "cuda", "--output",
        "/results/hvdbench-tf-horovod"]
    workers = spec["mpiReplicaSpecs"]["Worker"]
    worker = workers["template"]["spec"]["containers"][0]
    assert workers["replicas"] == 2
    assert [*worker["command"], *worker["args"]] == ["/usr/sbin/sshd", "-De", "-f", "/home/mpiuser/.sshd_config"]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 4}}
    assert workers["template"]["spec"]["securityContext"]["runAsUser"] == 1000
    shm = next(v for v in workers["template"]["spec"]["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}


def test_the_trainjob_runs_torchrun_on_the_stock_runtime(cli):
    (job,) = rendered(cli, "torch-ddp", "--image", IMAGE, "--nodes", "4", "--gpus-per-node", "8", "--model",
                      "resnet101", "--shm-size", "32Gi")
    spec = job["spec"]
    assert spec["runtimeRef"]["name"] == "torch-distributed"
    trainer = spec["trainer"]
    assert [*trainer["command"], *trainer["args"]] == [
        "torchrun", "--no-python", "bench", "torch-ddp", "--model", "resnet101", "--device", "cuda", "--output",
        "/results/hvdbench-torch-ddp"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (4, 8)
    # the patch names the runtime's own container (k8s/crds/torch_distributed.yaml)
    runtime = yaml.safe_load((ROOT / "k8s" / "crds" / "torch_distributed.yaml").read_text())
    (runtime_job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    runtime_container = runtime_job["template"]["spec"]["template"]["spec"]["containers"][0]["name"]
    (patch,) = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert patch["name"] == runtime_job["name"]
    assert patch["template"]["spec"]["template"]["spec"]["containers"][0]["name"] == runtime_container
    assert "32Gi" in json.dumps(patch)


def test_the_indexed_job_gives_each_pod_its_place(cli):
    service, job = rendered(cli, "tf-native", "--image", IMAGE, "--nodes", "2", "--gpus-per-node", "4",
                            "--name", "tfn")
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 8
    podspec = spec["template"]["spec"]
    assert podspec["subdomain"] == service["metadata"]["name"] == "tfn"
    assert service["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items()
    (worker,) = podspec["containers"]
    assert "command" not in worker  # the image's entry point runs bench
    assert worker["args"] == ["tf-native", "--device", "cuda", "--output", "/results/tfn"]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert {e["name"]: e["value"] for e in worker["env"]} == {
        "HVDBENCH_TF_WORKERS": "8", "HVDBENCH_TF_SUBDOMAIN": "tfn", "HVDBENCH_TF_PORT": "2222"}


def test_the_flags_give_the_same_run_back(cli, monkeypatch):
    """command_line() writes what the mode command parses back into the same configuration."""
    import bench.run

    cfg = RunConfig(mode="tf-native", model="resnet50", batch_size=16, image_size=32, precision="amp-bf16",
                    telemetry=False, windows=3, duration=12.5, strategy="multiworker",
                    attribution_steps=0)
    seen = []
    monkeypatch.setattr(bench.run, "run", seen.append)
    r = cli(*command_line(cfg))
    assert r.returncode == 0, r.stderr
    assert seen == [cfg]


@pytest.mark.parametrize("args, message", [
    (["torch-single"], "torch-single has no Kubernetes workload"),
    (["tf-native", "--strategy", "ps"], "tf-native runs its multiworker strategy"),
    (["torch-ddp", "--np", "4"], "leave out --np"),
    (["torch-ddp", "--output", "/x"], "leave out --output"),
    (["torch-ddp", "--device", "cpu"], "leave out --device"),
    (["torch-ddp", "--nodes", "0"], "--nodes must be at least 1"),
    (["torch-ddp", "--name", "Big_Name"], "--name 'Big_Name' must be a DNS label"),
    (["torch-ddp", "--name", "a" * 41], "at most 40 characters"),
    (["torch-ddp", "--shm-size", "lots"], "not a Kubernetes quantity"),
    (["torch-ddp", "--env", "NCCL_DEBUG"], "--env takes NAME=VALUE"),
    (["torch-ddp", "--env", "PET_NNODES=2"], "set by the operator or by bench k8s"),
    (["torch-ddp", "--batch-size", "0"], "--batch-size must be an integer >= 1"),
    (["no-such-mode"], "unknown mode 'no-such-mode'"),
    (["torch-ddp", "--data", "/tmp"], "read the dataset from --data-claim"),
    (["torch-ddp", "--loader", "torch"], "apply to runs with --data-claim"),
    (["torch-ddp", "--data-claim", "imagenet", "--loader", "tf"], "--loader tf feeds tensorflow"),
    (["torch-ddp", "--data-claim", "Image_Net"], "--data-claim 'Image_Net' must be a DNS label"),
])
def test_bad_input_is_one_line(cli, args, message):
    r = cli("k8s", args[0], "--image", IMAGE, *args[1:])
    assert r.returncode != 0 and r.stdout == ""
    assert message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_the_examples_are_what_bench_k8s_renders(cli):
    """k8s/examples holds one manifest per workload, each the output of the command in its first line
    (make k8s-examples writes them again)."""
    assert {workload(p.stem.split("-", 1)[1]) for p in EXAMPLES} == {"MPIJob", "TrainJob", "Job"}
    for path in EXAMPLES:
        text = path.read_text()
        command = text.splitlines()[0].split(": ", 1)[1]
        r = cli(*shlex.split(command)[1:])
        assert r.returncode == 0 and r.stdout == text, f"{path.name} is stale: run make k8s-examples"
        assert not k8s_check.check_text(text, path.name)


def test_the_docs_quote_the_rendered_command_lines():
    """docs/kubernetes.md shows what the examples' pods run, word for word."""
    docs = " ".join((ROOT / "docs" / "kubernetes.md").read_text().split())
    by_name = {p.name: [d for d in yaml.safe_load_all(p.read_text()) if d] for p in EXAMPLES}
    (mpijob,) = by_name["mpijob-tf-horovod.yaml"]
    (trainjob,) = by_name["trainjob-torch-ddp.yaml"]
    containers = [mpijob["spec"]["mpiReplicaSpecs"][role]["template"]["spec"]["containers"][0]
                  for role in ("Launcher", "Worker")]
    for shown in [*containers, trainjob["spec"]["trainer"]]:
        line = shlex.join([*shown["command"], *shown["args"]])
        assert line in docs, f"docs/kubernetes.md does not show {line}"


def test_the_results_claim_validates():
    assert k8s_check.check_text((ROOT / "k8s" / "results-claim.yaml").read_text(), "results-claim.yaml") == []


@pytest.mark.parametrize("edit, found", [
    (lambda d: d["spec"].update(slotPerWorker=1), "'slotPerWorker' was unexpected"),
    (lambda d: d["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0].update(volumeMount=[]),
     "'volumeMount' was unexpected"),
    (lambda d: d["spec"]["mpiReplicaSpecs"]["Worker"].update(replicas="two"), "'two' is not of type 'integer'"),
    (lambda d: d["spec"].pop("mpiReplicaSpecs"), "'mpiReplicaSpecs' is a required property"),
])
def test_the_validator_finds_what_the_api_server_would_refuse(edit, found):
    (doc,) = manifests(K8sJob(run=RunConfig(mode="torch-horovod"), image=IMAGE))
    assert k8s_check.problems(doc, "t") == []
    edit(doc)
    assert any(found in p for p in k8s_check.problems(doc, "t")), k8s_check.problems(doc, "t")


def test_the_validator_checks_builtin_kinds_at_its_kubernetes_version():
    service, job = manifests(K8sJob(run=RunConfig(mode="tf-native"), image=IMAGE))
    job["spec"]["template"]["spec"]["subdomin"] = "x"
    assert k8s_check.problems(job, "t") == [
        f"t: Job hvdbench-tf-native: spec.template.spec: Additional properties are not allowed ('subdomin' was "
        f"unexpected) (Kubernetes {k8s_check.KUBERNETES})"]
    assert k8s_check.problems({"apiVersion": "batch/v9", "kind": "Job"}, "t") == [
        f"t: Job ?: Kubernetes {k8s_check.KUBERNETES} has no Job in batch/v9"]


def test_the_vendored_crds_say_where_they_come_from():
    readme = (ROOT / "k8s" / "crds" / "README.md").read_text()
    for name in ("kubeflow.org_mpijobs.yaml", "trainer.kubeflow.org_trainjobs.yaml", "torch_distributed.yaml",
                 "LICENSE-mpi-operator", "LICENSE-trainer"):
        assert (ROOT / "k8s" / "crds" / name).is_file() and name in readme
    assert "v0.8.0" in readme and "v2.3.0" in readme and "Apache License" in readme


# -- a pod of the indexed Job: TF_CONFIG from its name (bench.launching.k8s_pod) ----------------------------
POD = {"HVDBENCH_TF_WORKERS": "3", "HVDBENCH_TF_SUBDOMAIN": "tfn", "JOB_COMPLETION_INDEX": "1"}


def test_a_pod_builds_tf_config_from_its_name():
    text = pod.pod_tf_config(POD, "tfn-1")
    assert json.loads(text) == {"cluster": {"worker": ["tfn-0.tfn:2222", "tfn-1.tfn:2222", "tfn-2.tfn:2222"]},
                                "task": {"type": "worker", "index": 1}}
    info = detect({"TF_CONFIG": text})
    assert (info.launcher, info.rank, info.world_size) == ("tf-config", 1, 3)
    assert pod.pod_tf_config({**POD, "HVDBENCH_TF_PORT": "4000"}, "tfn-1.tfn.default.svc").count(":4000") == 3
    assert pod.pod_tf_config({**POD, "TF_CONFIG": "{}"}, "tfn-1") is None  # given: left as it is
    assert pod.pod_tf_config({"JOB_COMPLETION_INDEX": "1"}, "tfn-1") is None  # not the tf-native Job


@pytest.mark.parametrize("env, host, message", [
    (POD, "other-7", "host name 'other-7' is not '<job>-1'"),
    ({**POD, "JOB_COMPLETION_INDEX": "3"}, "tfn-3", "JOB_COMPLETION_INDEX='3' must be an integer in [0, 2]"),
    ({**POD, "HVDBENCH_TF_WORKERS": "x"}, "tfn-1", "HVDBENCH_TF_WORKERS='x'"),
    ({**POD, "HVDBENCH_TF_SUBDOMAIN": ""}, "tfn-1", "HVDBENCH_TF_SUBDOMAIN (the headless Service) is not set"),
    ({**POD, "HVDBENCH_TF_PORT": "70000"}, "tfn-1", "HVDBENCH_TF_PORT='70000'"),
])
def test_a_malformed_pod_environment_is_one_clear_error(env, host, message):
    with pytest.raises(BenchError, match=None) as exc:
        pod.pod_tf_config(env, host)
    assert message in str(exc.value)


def test_a_pod_waits_for_its_peers_names_then_names_those_that_never_came(monkeypatch):
    up = {"tfn-0.tfn"}
    monkeypatch.setattr(pod, "resolve_error", lambda h: None if h in up else "Name or service not known")
    text = pod.pod_tf_config(POD, "tfn-1")
    with pytest.raises(BenchError, match=r"did not resolve within 0 s: tfn-1.tfn \(Name or service not known\), "
                                         r"tfn-2.tfn"):
        pod.wait_resolvable(text, 0, poll_s=0)
    calls = []

    def later(seconds):  # the others come up while it waits
        calls.append(seconds)
        up.update({"tfn-1.tfn", "tfn-2.tfn"})

    monkeypatch.setattr(pod.time, "sleep", later)
    pod.wait_resolvable(text, 60, poll_s=0.5)
    assert calls == [0.5]


def test_the_offline_check_without_its_validators_is_one_line(monkeypatch, capsys, tmp_path):
    """`python -m tools.k8s_check` where kubernetes-validate is not installed (bench's own install has no
    validator): exit 2 and one line naming the module and how to get it, never a traceback."""
    import importlib.util
    import sys

    from tests.conftest import ROOT

    monkeypatch.setitem(sys.modules, "kubernetes_validate", None)  # import of it raises ImportError
    spec = importlib.util.spec_from_file_location("k8s_check_bare", ROOT / "tools" / "k8s_check.py")
    bare = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bare)
    manifest = tmp_path / "job.yaml"
    manifest.write_text("kind: Job\n")
    monkeypatch.setattr(sys, "argv", ["k8s_check", str(manifest)])
    assert bare.main() == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: k8s-check needs the Python module kubernetes_validate"), err
    assert "make venv" in err[0] and "pip install" in err[0]
