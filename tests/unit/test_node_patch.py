"""A node check's verdict as Kubernetes node labels and a taint (bench.records.node_patch), from bench preflight,
bench soak and bench diagnose: what the patch holds, the commands printed, and bad names or folders in one line
before any check runs (issue 95)."""

from __future__ import annotations

import json

import pytest

from bench.errors import BenchError
from bench.records import node_patch


def test_a_verdict_is_labels_an_annotation_and_a_taint_only_on_an_error(tmp_path):
    lines = node_patch.write(str(tmp_path), "gpu-7", "preflight", ["gpu gpu 0 (NVIDIA H200)"], ["host swap"],
                             "20261203T194912Z", "/r/soak.json")
    body = json.loads((tmp_path / "gpu-7-preflight.json").read_text())
    assert body["metadata"]["labels"] == {"hvdbench.io/preflight": "error",
                                          "hvdbench.io/preflight-at": "20261203T194912Z"}
    assert body["metadata"]["annotations"]["hvdbench.io/preflight"] == (
        "1 error(s), 1 warning(s): gpu gpu 0 (NVIDIA H200); host swap (record: /r/soak.json)")
    assert "spec" not in body  # a patch of spec.taints would replace every taint the node has
    assert lines == [f"kubectl patch node gpu-7 --type merge --patch-file {tmp_path}/gpu-7-preflight.json",
                     "kubectl taint node gpu-7 hvdbench.io/preflight=error:NoSchedule --overwrite"]
    # the next run replaces the file whole: a node that passes is labelled pass and its taint is lifted
    lines = node_patch.write(str(tmp_path), "gpu-7", "preflight", [], [], "20261203T200000Z")
    body = json.loads((tmp_path / "gpu-7-preflight.json").read_text())
    assert body["metadata"]["labels"]["hvdbench.io/preflight"] == "pass"
    assert body["metadata"]["annotations"]["hvdbench.io/preflight"] == "0 error(s), 0 warning(s)"
    assert lines[1].startswith("kubectl taint node gpu-7 hvdbench.io/preflight:NoSchedule-")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu-7-preflight.json"]  # no temporary left
    warned = node_patch.patch("soak", [], ["temperature node"], "t")
    assert warned["metadata"]["labels"]["hvdbench.io/soak"] == "warning"
    long = node_patch.patch("soak", ["x" * 80] * 40, [], "t")["metadata"]["annotations"]["hvdbench.io/soak"]
    assert len(long) == node_patch.ANNOTATION_CHARS and long.endswith("...")


def test_the_node_name_is_given_or_the_pods_or_this_hosts_and_must_be_a_kubernetes_name(monkeypatch):
    monkeypatch.setenv("NODE_NAME", "pod-node-3")
    assert node_patch.node_name("gpu-1.cluster") == "gpu-1.cluster"
    assert node_patch.node_name() == "pod-node-3"
    monkeypatch.delenv("NODE_NAME")
    monkeypatch.setattr(node_patch.socket, "gethostname", lambda: "GPU-9.example.org")
    assert node_patch.node_name() == "gpu-9"
    for bad in ("Node_1", "-a", "a" * 254):
        with pytest.raises(BenchError, match="is not a Kubernetes node name"):
            node_patch.node_name(bad)


def test_a_folder_that_cannot_be_made_is_one_line_and_none_means_no_patch(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(BenchError, match=r"--node-patch .*file/x: cannot make the folder"):
        node_patch.prepare(str(tmp_path / "file" / "x"), "n")
    assert node_patch.prepare("", "Not_A_Name") == ""  # without --node-patch the name is not read
    assert node_patch.prepare(str(tmp_path / "new"), "n1") == "n1" and (tmp_path / "new").is_dir()


def test_preflight_writes_the_patch_after_its_table_and_checks_the_name_before_any_check(tmp_path, monkeypatch,
                                                                                       capsys):
    from bench.commands import preflight
    from bench.measure.env_faults import Finding

    ran = []
    found = [Finding("gpu", "gpu 0 (NVIDIA H200)", "error", "x"), Finding("host", "swap", "warning", "y"),
             Finding("network", "lo", "ok", "z")]
    monkeypatch.setattr(preflight, "findings", lambda cfg: ran.append(cfg) or found)
    with pytest.raises(BenchError, match="is not a Kubernetes node name"):
        preflight.report(preflight.PreflightConfig(node_patch=str(tmp_path), node="Bad_Name"))
    assert ran == []
    status = preflight.report(preflight.PreflightConfig(node_patch=str(tmp_path), node="n1", as_json=True))
    assert status == 1
    out = capsys.readouterr()
    assert json.loads(out.out)[0]["status"] == "error"  # stdout stays the JSON; the commands go to stderr
    assert "kubectl taint node n1 hvdbench.io/preflight=error:NoSchedule --overwrite" in out.err
    body = json.loads((tmp_path / "n1-preflight.json").read_text())
    assert body["metadata"]["annotations"]["hvdbench.io/preflight"].startswith(
        "1 error(s), 1 warning(s): gpu gpu 0 (NVIDIA H200); host swap")


def test_diagnose_refuses_a_node_without_a_kubernetes_name_before_any_step(tmp_path):
    """(Each node's patch from its verdict: tests/system/test_diagnose_cluster.py.)"""
    from bench.commands import diagnose as D

    with pytest.raises(BenchError, match="'node_1' is not a Kubernetes node name"):
        D.diagnose(D.DiagnoseConfig(nodes=("node_1", "node2"), node_patch=str(tmp_path / "p"),
                                    output=str(tmp_path)))
    assert not (tmp_path / "p").exists() or list((tmp_path / "p").iterdir()) == []
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("diagnose-")] == []
