"""bench diagnose in process: the rules over figures, the pairs' schedule, baselines, the record and its report.
The real diagnoses, with nodes and links broken on purpose, are in tests/system/test_diagnose_cluster.py."""

import json
from itertools import combinations

import pytest

from bench.commands.diagnose import DiagnoseConfig, load_baseline, pair_rounds, resolve_nodes, signature
from bench.commands.diagnose import rules as R
from bench.commands.diagnose.alone import alone_env
from bench.commands.diagnose.render import markdown
from bench.errors import BenchError
from bench.records.schema import Diagnose, mismatch
from tests import samples


def devices(**rates):
    return {"device": {n: {"samples_per_sec": r} for n, r in rates.items()}}


def test_the_default_rules_load_and_each_kind_has_a_peer_rule():
    rules = R.load()
    assert {r.kind for r in rules if r.against == "peers"} == {"device", "pair", "rank"}
    assert {r.kind for r in rules if r.against == "baseline"} == {"device", "pair", "job"}


@pytest.mark.parametrize("text, says", [
    ('[[rule]]\nname="x"\nkind="device"\nfigure="samples_per_sec"\nagainst="peers"\ndirection="below"\n'
     'severity="error"\n', "missing tolerance"),
    ('[[rule]]\nname="x"\nkind="gpu"\nfigure="samples_per_sec"\nagainst="peers"\ndirection="below"\n'
     'tolerance=0.2\nseverity="error"\n', "kind must be"),
    ('[[rule]]\nname="x"\nkind="pair"\nfigure="samples_per_sec"\nagainst="peers"\ndirection="below"\n'
     'tolerance=0.2\nseverity="error"\n', "a pair has the figures busbw_GBps, latency_us"),
    ('[[rule]]\nname="x"\nkind="device"\nfigure="samples_per_sec"\nagainst="peers"\ndirection="below"\n'
     'tolerance=1.5\nseverity="error"\n', "tolerance must be"),
    ('[[rule]]\nname="x"\nkind="device"\nfigure="samples_per_sec"\nagainst="peers"\ndirection="below"\n'
     'tolerance=0.2\nseverity="error"\nthreshold=2\n', "unknown threshold"),
    ("rule = [", "not TOML"),
    ("", "no [[rule]] tables"),
])
def test_a_bad_rules_file_gets_one_line(tmp_path, text, says):
    path = tmp_path / "rules.toml"
    path.write_text(text)
    with pytest.raises(BenchError, match=".*") as exc:
        R.load(path)
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_a_slow_device_is_flagged_against_its_peers_and_no_other():
    found = R.evaluate(R.load(), devices(node1=10.0, node2=10.4, node3=6.0, node4=9.8), None)
    assert [(f.where, f.severity) for f in found] == [("node3", "error")]
    f = found[0]
    assert f.figure == 6.0 and f.expected == 10.0 and "samples_per_sec < 0.75 x peers" in f.rule


def test_a_node_whose_input_pipeline_is_slow_is_flagged_against_its_peers():
    """With --data the devices phase gives each device its pipeline's rate alone: a slow disk or busy CPUs."""
    figures = {"device": {n: {"samples_per_sec": 10.0, "loader_rate": r, "data_wait_share": 0.01}
                          for n, r in (("node1", 400.0), ("node2", 380.0), ("node3", 180.0), ("node4", 410.0))}}
    found = R.evaluate(R.load(), figures, None)
    assert [(f.where, f.name, f.rule.split(":")[0]) for f in found] == \
        [("node3", "loader_rate", "pipeline-slower-than-peers")]
    figures["device"]["node3"]["loader_rate"] = 300.0  # within the tolerance: 300 > 0.65 x 400
    assert R.evaluate(R.load(), figures, None) == []


def test_noise_within_the_tolerance_is_no_finding():
    assert R.evaluate(R.load(), devices(node1=10.0, node2=8.0, node3=9.1, node4=10.9), None) == []


def test_every_device_slowed_alike_is_found_by_the_baseline_only():
    rules = R.load()
    now = devices(node1=5.0, node2=5.1, node3=4.9, node4=5.0)
    assert R.evaluate(rules, now, None) == []
    base = devices(node1=10.0, node2=10.0, node3=10.0, node4=10.2)
    found = R.evaluate(rules, now, base)
    assert sorted(f.where for f in found) == ["node1", "node2", "node3", "node4"]
    assert {f.against for f in found} == {"baseline"}


def test_a_member_new_to_the_baseline_is_held_against_its_median():
    found = R.evaluate(R.load(), devices(node1=10.0, node2=10.0, node9=5.0), devices(node1=10.0, node2=10.0))
    assert [(f.where, f.against, f.expected) for f in found] == [("node9", "peers", 10.0),
                                                                          ("node9", "baseline", 10.0)]


def test_two_members_give_no_peer_verdict():
    assert R.evaluate(R.load(), devices(node1=10.0, node2=1.0), None) == []


def test_a_slow_link_is_named_as_the_node_in_every_flagged_pair():
    pairs = {"node1+node2": 0.05, "node1+node3": 0.31, "node1+node4": 0.29,
             "node2+node3": 0.05, "node2+node4": 0.06, "node3+node4": 0.30}
    figures = {"pair": {p: {"busbw_GBps": b, "latency_us": 100.0} for p, b in pairs.items()}}
    found = R.evaluate(R.load(), figures, None)
    assert sorted(f.where for f in found) == ["node1+node2", "node2+node3", "node2+node4"]
    node = R.common_member(found)
    assert [(f.where, f.pairs) for f in node] == [("node2", ["node1+node2", "node2+node3", "node2+node4"])]
    latency = {"pair": {p: {"busbw_GBps": 0.3, "latency_us": 900.0 if "node4" in p else 100.0} for p in pairs}}
    found = R.evaluate(R.load(), latency, None)
    assert [f.where for f in R.common_member(found)] == ["node4"]


def test_no_common_member_when_the_flagged_pairs_share_none():
    found = [R.finding("pair", "a+b", 1, 2, "r", "error", "r", "peers"),
             R.finding("pair", "c+d", 1, 2, "r", "error", "r", "peers")]
    assert R.common_member(found) == []


def test_every_finding_kind_has_the_same_keys():
    """A did-not-run finding had no `against` key (the diagnose tier's test failed on a KeyError): every finding,
    ruled or derived, carries the same keys, and the schema requires them."""
    from bench.records.schema import Finding

    figures = {"rank": {f"rank {r} (node{r + 1})": {"compute_s": c} for r, c in enumerate([0.50, 0.52, 1.1, 0.49])}}
    ruled = R.evaluate(R.load(), figures, None)
    pairs = [R.finding("pair", p, 1, 2, "r", "error", "r", "peers") for p in ("n1+n4", "n2+n4")]
    derived = [*R.common_member(pairs), R.finding("job", "job", None, "a result", "did-not-run: x", "error",
                                                  "did-not-run", None, phase="job")]
    keys = {"kind", "where", "figure", "expected", "rule", "severity", "name", "against"}
    for f in [*ruled, *pairs, *derived]:
        dumped = f.model_dump(mode="json", exclude_unset=True)  # as the record holds it
        assert keys <= set(dumped), f
        Finding.model_validate(dumped)


def test_a_straggler_rank_is_flagged_by_its_compute():
    figures = {"rank": {f"rank {r} (node{r + 1})": {"compute_s": c} for r, c in enumerate([0.50, 0.52, 1.1, 0.49])}}
    found = R.evaluate(R.load(), figures, None)
    assert [f.where for f in found] == ["rank 2 (node3)"]


@pytest.mark.parametrize("n", range(2, 11))
def test_all_pairs_come_once_in_rounds_of_disjoint_pairs(n):
    nodes = [f"n{i}" for i in range(n)]
    rounds = pair_rounds(nodes, "all")
    flat = [tuple(sorted(p)) for r in rounds for p in r]
    assert sorted(flat) == sorted(combinations(sorted(nodes), 2))
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))


@pytest.mark.parametrize("n", range(3, 12))
def test_a_ring_of_pairs_holds_each_node_twice(n):
    nodes = [f"n{i}" for i in range(n)]
    rounds = pair_rounds(nodes, "ring")
    flat = [p for r in rounds for p in r]
    assert len(flat) == n and all(sum(x in p for p in flat) == 2 for x in nodes)
    assert len(rounds) <= 3
    for r in rounds:
        members = [x for p in r for x in p]
        assert len(members) == len(set(members))
    assert pair_rounds(nodes, "auto") == pair_rounds(nodes, "all" if n <= 8 else "ring")


def test_a_baseline_measured_differently_is_refused(tmp_path):
    cfg = DiagnoseConfig(nodes=("a", "b", "c"), baseline=str(tmp_path / "base.json"))
    base = {"kind": "diagnose-baseline", "from_run": "r", "created_utc": "t", "nodes": ["a"], "figures": {},
            "signature": {**signature(cfg), "large_bytes": 1}}
    (tmp_path / "base.json").write_text(json.dumps(base))
    with pytest.raises(BenchError, match="measured differently \\(large_bytes\\)"):
        load_baseline(cfg)
    (tmp_path / "base.json").write_text(json.dumps({k: v for k, v in base.items() if k != "nodes"}))
    with pytest.raises(BenchError, match="does not match its schema.*nodes.*--save-baseline writes a baseline"):
        load_baseline(cfg)
    (tmp_path / "base.json").write_text("{}")
    with pytest.raises(BenchError, match="is not a record of hvdbench.*--save-baseline writes a baseline"):
        load_baseline(cfg)


@pytest.mark.parametrize("kw, says", [
    ({"mode": "torch-nope"}, "unknown mode"), ({"phases": ("devices", "disks")}, "--phases takes"),
    ({"large_bytes": 5000}, "multiple of --small-bytes"), ({"nodes": ("a",)}, "needs 2 nodes"),
    ({"attribution_steps": 1}, "at least 2"), ({"backend": "mpi"}, "unknown --backend"),
])
def test_bad_options_get_one_line(kw, says):
    with pytest.raises(BenchError, match=says):
        DiagnoseConfig(**{"nodes": ("a", "b"), **kw}).check()


def test_outside_an_allocation_it_says_how_to_run(monkeypatch):
    for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(BenchError, match="inside a Slurm allocation .* or on a host list"):
        resolve_nodes(None)
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    with pytest.raises(BenchError, match="not under srun"):
        resolve_nodes(None)
    with pytest.raises(BenchError, match="names a node twice"):
        resolve_nodes(("a", "b", "a"))


def test_a_device_alone_sees_no_launcher_and_its_own_gpu():
    env = {"SLURM_JOB_ID": "3", "SLURM_LOCALID": "1", "SLURM_PROCID": "5", "PMIX_RANK": "5",
           "OMPI_COMM_WORLD_RANK": "1", "MASTER_ADDR": "n1", "RANK": "5", "CUDA_VISIBLE_DEVICES": "4,5,6,7",
           "PATH": "/bin"}
    out = alone_env(env, 4)
    assert out == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "5"}
    assert alone_env({"HVDBENCH_DIAGNOSE_DEVICE": "2"}, 4)["CUDA_VISIBLE_DEVICES"] == "2"
    assert "CUDA_VISIBLE_DEVICES" not in alone_env({"SLURM_LOCALID": "0"}, 1)


def record(findings, figures=None, **more):
    """A diagnose record of these findings (checked against its model as bench diagnose's own are)."""
    return Diagnose(kind="diagnose", schema_version=1, run_id="r1", created_utc="now", hvdbench_version="0", config={},
                    executor="slurm", nodes=["node1", "node2", "node3"], left_out=[], seconds=1.0,
                    phases={"devices": {"seconds": 1.0, "steps": []}}, figures=figures or {}, rules=["r"],
                    baseline=None, findings=findings, passed=not findings, **more)


def test_the_record_matches_its_schema_and_the_report_names_each_finding():
    figures = devices(node1=10.0, node2=10.0, node3=4.0)
    found = R.evaluate(R.load(), figures, None)
    rec = record(found, figures)
    text = markdown(rec)
    assert "diagnose FAIL" in text and "| error | device | node3 | 4 | 10 |" in text
    assert "findings" in mismatch({**rec.model_dump(mode="json"), "findings": [{"kind": "disk"}]}, "diagnose")
    assert "None: every check passed." in markdown(record([]))


def test_a_saved_baseline_matches_its_schema():
    from bench.commands.diagnose import baseline_record

    figures = devices(node1=10.0, node2=10.0, node3=9.9)
    base = baseline_record(record([], figures), DiagnoseConfig(nodes=("node1", "node2", "node3")))
    data = base.model_dump(mode="json")
    assert mismatch(data, "diagnose-baseline") is None
    assert "figures" in mismatch({k: v for k, v in data.items() if k != "figures"}, "diagnose-baseline")


def test_the_published_schema_names_the_findings_fields():
    from bench.records.schema import json_schema

    schema = json_schema("diagnose")
    finding = schema["$defs"]["Finding"]["properties"]
    assert {"kind", "where", "figure", "expected", "rule", "severity"} <= set(finding)
    assert "findings" in schema["required"] and json_schema()["title"] == "hvdbench result"


def test_telemetry_says_why_a_gpu_is_slow_and_warns_of_one_that_throttled_unflagged():
    from bench.commands.diagnose import _device_telemetry, _throttled

    def result(reasons):
        gpu = {"throttled": bool(reasons), "throttle_reasons": reasons, "power_w_mean": 300.0}
        return samples.result(telemetry={"available": True, "nodes": [{"gpus": [gpu]}]})

    figures = {"device": {"n1/0": {"samples_per_sec": 100.0, **_device_telemetry(result([]))},
                          "n1/1": {"samples_per_sec": 101.0, **_device_telemetry(result(["sw_thermal_slowdown"]))},
                          "n2/0": {"samples_per_sec": 60.0, **_device_telemetry(result(["sw_power_cap"]))},
                          "n2/1": {"samples_per_sec": 99.0, **_device_telemetry(result([]))}}}
    found = R.evaluate(R.load(), figures, None)
    found += _throttled(figures["device"], found)
    by_where = {f.where: f for f in found}
    assert by_where["n2/0"].severity == "error" and by_where["n2/0"].why == "throttled: sw_power_cap"
    assert by_where["n1/1"].severity == "warning" and "sw_thermal_slowdown" in by_where["n1/1"].why
    assert set(by_where) == {"n2/0", "n1/1"}
    assert _device_telemetry(samples.result(telemetry={"available": False})) == {}


@pytest.mark.parametrize("state, why", [
    ("RUNNING", None),
    ("COMPLETING", "the Slurm allocation 12 ended (COMPLETING)"),  # revoked: its steps die ("job 12 has expired")
    ("TIMEOUT", "the Slurm allocation 12 ended (TIMEOUT)"),
    ("", "the Slurm allocation 12 ended (gone)"),
])
def test_a_failed_step_is_the_allocations_end_unless_it_still_runs(monkeypatch, state, why):
    import subprocess

    from bench.commands.diagnose.hosts import Slurm

    monkeypatch.setenv("SLURM_JOB_ID", "12")
    asked = []

    def squeue(cmd, **kwargs):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, f"{state}\n", "")

    monkeypatch.setattr(subprocess, "run", squeue)
    assert Slurm(["node1"], 1).gone() == why
    assert asked == [["squeue", "-h", "-j", "12", "-o", "%T"]]


def test_a_value_rule_holds_every_member_to_its_bound_alone(tmp_path):
    """SuperBench's "value" rule: an absolute floor, which flags even when every member is alike (peers cannot)."""
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nname="fleet-floor"\nkind="device"\nfigure="samples_per_sec"\nagainst="value"\n'
                    'direction="below"\nvalue=9.5\nseverity="error"\n')
    (rule,) = R.load(path)
    assert rule.text() == "fleet-floor: samples_per_sec < 9.5"
    found = R.evaluate([rule], devices(node1=9.0, node2=9.1, node3=10.0), None)
    assert [(f.where, f.expected) for f in found] == [("node1", 9.5), ("node2", 9.5)]
    assert {f.against for f in record(found).findings} == {"value"}  # the record takes them (it refused them)
    path.write_text(path.read_text().replace("value=9.5", "tolerance=0.1"))
    with pytest.raises(BenchError, match="missing value; unknown tolerance"):
        R.load(path)
    path.write_text(path.read_text().replace("tolerance=0.1", 'value="fast"'))
    with pytest.raises(BenchError, match="value must be a number"):
        R.load(path)


def test_each_node_is_accepted_unless_an_error_names_it():
    found = [R.finding("device", "node2/1", 4.0, 10.0, "device-slower-than-peers: x", "error", "samples_per_sec",
                       "peers"),
             R.finding("rank", "rank 5 (node3)", 2.0, 1.0, "straggler-rank: x", "warning", "compute_s", "peers"),
             R.finding("pair", "node1+node3", 1.0, 5.0, "pair-bandwidth-below-peers: x", "error", "busbw_GBps",
                       "peers"),
             R.finding("job", "job", 1.0, 2.0, "job-slower-than-baseline: x", "error", "samples_per_sec", "baseline")]
    rows = R.accept(["node1", "node2", "node3"], found)
    assert [r.model_dump() for r in rows] == [
        {"node": "node1", "accepted": True, "errors": [], "warnings": []},  # a pair's finding names neither end
        {"node": "node2", "accepted": False, "errors": ["device-slower-than-peers"], "warnings": []},
        {"node": "node3", "accepted": True, "errors": [], "warnings": ["straggler-rank"]}]
    text = markdown(record(found, accept=rows))
    assert "| node2 | NO | device-slower-than-peers | - |" in text and "| node1 | yes | - | - |" in text
    assert "## Accept" not in markdown(record([]))  # a record written before it has none


def test_baselines_from_many_nodes_merge_into_each_members_median(tmp_path):
    from bench.commands.diagnose import merge_baselines

    merged = merge_baselines([devices(node1=10.0, node2=8.0), devices(node1=12.0, node3=9.0),
                              devices(node1=11.5, node2=8.4)])
    assert merged == {"device": {"node1": {"samples_per_sec": 11.5}, "node2": {"samples_per_sec": 8.2},
                                 "node3": {"samples_per_sec": 9.0}}}
    cfg = DiagnoseConfig(nodes=("a", "b", "c"))
    paths = []
    for i, figures in enumerate((devices(a=10.0, b=10.0), devices(a=12.0, c=9.0))):
        path = tmp_path / f"base{i}.json"
        path.write_text(json.dumps({"kind": "diagnose-baseline", "from_run": "r", "created_utc": "now",
                                    "nodes": ["a", "b", "c"], "signature": signature(cfg), "figures": figures}))
        paths.append(str(path))
    both = DiagnoseConfig(nodes=("a", "b", "c"), baseline=",".join(paths))
    assert load_baseline(both) == {"device": {"a": {"samples_per_sec": 11.0}, "b": {"samples_per_sec": 10.0},
                                              "c": {"samples_per_sec": 9.0}}}
    # a member new to every baseline is held against the kind's median there; a slow one is found
    found = R.evaluate(R.load(), devices(a=11.0, b=6.0, c=9.0, d=7.0), load_baseline(both))
    assert {f.where for f in found if f.against == "baseline"} == {"b", "d"}


SIF = ("apptainer", "exec", "--nv", "/shared/hvdbench.sif")


def planned(monkeypatch, tmp_path, **kw):
    """Every step each phase of a diagnose of node1 and node2 would start (none is started): phase -> argvs."""
    import bench.commands.diagnose as D

    starts = {}

    def run_steps(steps, timeout_s):
        for s in steps:
            starts.setdefault(s.label, []).append(s.argv)
            s.code = 0

    monkeypatch.setattr(D, "run_steps", run_steps)
    d = D.Diagnosis(DiagnoseConfig(nodes=("node1", "node2"), output=str(tmp_path), **kw))
    for phase in D.PHASES:
        d.healthy = ["node1", "node2"]  # no step ran, so none wrote a result: every node kept in for the next
        getattr(d, phase)()
    return starts


@pytest.mark.parametrize("hosts", [None, ("node1", "node2")])
def test_with_a_container_every_step_starts_bench_inside_it(monkeypatch, tmp_path, hosts):
    """--container: each phase's command (srun's or ssh's and mpirun's) runs bench from the container it names,
    never this process's interpreter, which the nodes' hosts need not have (a SIF's users)."""
    import sys

    from bench.commands.diagnose.hosts import ALONE_IN_CONTAINER

    starts = planned(monkeypatch, tmp_path, container=SIF, hosts=hosts, devices_per_node=2)
    assert sorted(starts) == ["devices", "job", "network"]
    for argv in starts["devices"]:  # srun's argv, or ssh's remote line
        words = argv if hosts is None else argv[-1].split()
        at = words.index("apptainer")
        assert words[at:at + 4] == list(SIF) and words[at + 4:at + 6] == list(ALONE_IN_CONTAINER[:2])
        assert "torch-ddp" in words and sys.executable not in " ".join(words)
    (pair,) = starts["network"]
    (job,) = starts["job"]
    for argv, command in ((pair, "allreduce"), (job, "torch-ddp")):
        at = argv.index("apptainer")
        assert argv[at:at + 6] == [*SIF, "bench", command] and sys.executable not in argv
    assert starts["job"][0][0] == ("srun" if hosts is None else "mpirun")
    # without it, this installation's interpreter, as before
    for argvs in planned(monkeypatch, tmp_path, hosts=hosts).values():
        assert all("apptainer" not in a and sys.executable in " ".join(a) for a in argvs)


def test_a_container_step_leaves_the_folder_it_starts_in_off_its_path():
    """The device step's python3 -c drops '' from sys.path before it imports bench: apptainer binds the current
    folder, and a checkout's bench/ there would stand in for the container's."""
    from bench.commands.diagnose.hosts import ALONE_IN_CONTAINER

    code = ALONE_IN_CONTAINER[2]
    head, _, tail = code.partition("from bench")
    scope = {}
    import sys

    saved = list(sys.path)
    try:
        sys.path[:0] = ["", "."]
        exec(head, scope)  # noqa: S102 - the step's own first statement
        assert "" not in sys.path and "." not in sys.path
    finally:
        sys.path[:] = saved
    assert tail.startswith(".commands.diagnose.alone import main")


def test_a_launcher_missing_here_is_one_line_before_any_step(monkeypatch, tmp_path):
    """diagnose run inside a container has no srun: one line that says where to run it, and nothing started."""
    import shutil

    import bench.commands.diagnose as D

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("APPTAINER_CONTAINER", "/shared/hvdbench.sif")
    d = D.Diagnosis(DiagnoseConfig(nodes=("node1", "node2"), output=str(tmp_path)))
    with pytest.raises(BenchError, match=r"with srun, not found on PATH here \(this process runs in a container, "
                                         r"apptainer/singularity: run bench diagnose where srun is, with --container"):
        d.check_launchers()
    d = D.Diagnosis(DiagnoseConfig(nodes=("a", "b"), hosts=("a", "b"), phases=("devices",), output=str(tmp_path)))
    monkeypatch.delenv("APPTAINER_CONTAINER")
    with pytest.raises(BenchError, match="with ssh, not found"):  # mpirun only for the phases that start jobs
        d.check_launchers()
    assert list(tmp_path.iterdir()) == []


def test_a_container_command_the_shell_cannot_split_is_one_line():
    from bench.commands.diagnose import _words

    assert _words("--container")("apptainer exec --nv '/my sifs/h.sif'") == (
        "apptainer", "exec", "--nv", "/my sifs/h.sif")
    with pytest.raises(BenchError, match="--container: No closing quotation"):
        _words("--container")("apptainer exec 'h.sif")


def test_a_pairs_lucky_baseline_figure_sets_no_bar_a_healthy_run_cannot_meet():
    """Measured in the diagnose tier: a healthy baseline's node2+node3 latency was 448.5 us (the other pairs
    1118-1717 us); the next healthy run's 1381 us was over 3 x 448.5. The pair rules hold a member to the more
    lenient of its own baseline figure and the baseline's median; a real slowdown is still found."""
    def pairs(latency, busbw=None):
        return {"pair": {p: {"latency_us": lat, "busbw_GBps": (busbw or {}).get(p, 0.3)}
                         for p, lat in latency.items()}}
    base = pairs({"node1+node2": 1118.0, "node1+node3": 1450.0, "node2+node3": 448.5, "node3+node4": 1717.0},
                 {"node2+node3": 0.9})
    healthy = pairs({"node1+node2": 1200.0, "node1+node3": 1390.0, "node2+node3": 1381.0, "node3+node4": 1500.0})
    assert [f for f in R.evaluate(R.load(), healthy, base) if f.against == "baseline"] == []
    slow = pairs({"node1+node2": 1200.0, "node1+node3": 1390.0, "node2+node3": 5000.0, "node3+node4": 1500.0},
                 {"node1+node2": 0.1})
    found = [(f.where, f.name, f.expected) for f in R.evaluate(R.load(), slow, base) if f.against == "baseline"]
    assert found == [("node1+node2", "busbw_GBps", 0.3), ("node2+node3", "latency_us", 1284.0)]
    # a device rule has no floor: a node that was faster than its peers and fell back is still held to itself
    assert {r.name for r in R.load() if r.median_floor} == {"pair-bandwidth-below-baseline",
                                                            "pair-latency-above-baseline"}


def test_median_floor_is_a_baseline_rules_option_and_a_boolean(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nname = "x"\nkind = "pair"\nfigure = "latency_us"\nagainst = "peers"\n'
                    'direction = "above"\ntolerance = 2.0\nseverity = "error"\nmedian_floor = true\n')
    with pytest.raises(BenchError, match="unknown median_floor"):
        R.load(path)
    path.write_text(path.read_text().replace('"peers"', '"baseline"').replace("= true", '= "yes"'))
    with pytest.raises(BenchError, match="median_floor must be true or false"):
        R.load(path)
