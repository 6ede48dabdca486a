"""Checkpoints and resuming (--checkpoint-every, --resume-from; bench.measure.checkpoint), and the fixed-time run
(--duration with --epochs), in real runs: a run that loses a rank after a checkpoint, resumed, ends with exactly
the parameters of one never interrupted. Both frameworks train a model with dropout (the Transformer on real text),
whose every rank draws its own masks: PyTorch's random state must come back, and nothing between the checkpoint and
the step may draw from it (a DataLoader did, for its workers' seeds); TensorFlow's masks are keyed by the step count
its checkpoint holds (bench.modes.tf_common.DropoutMasks). The checks: tests/unit/."""

import json
import shutil
import tempfile

import pytest

from bench import scratch
from bench.measure import checkpoint
from tests.conftest import bench, only_result
from tests.unit.test_checkpoint import EPOCHS

TRAINING = ["--model", "resnet20", "--image-size", "12", "--batch-size", "32", "--epochs", str(EPOCHS),
            "--base-lr", "0.8", "--warmup-epochs", "1", "--loader-workers", "1", "--no-telemetry", "--np", "2"]
DROPOUT = ["--model", "transformer-small", "--seq-len", "16", "--batch-size", "32", "--epochs", str(EPOCHS),
           "--warmup-epochs", "1", "--loader-workers", "1", "--no-telemetry", "--np", "2"]
# what each case's mode trains, on what: both frameworks' dropout, and TensorFlow reading TFRecord shards with two
# workers (each shard's records in a fixed order; the one-file held-out split read by both)
IDENTITY = {"torch-ddp": ("torch-ddp", "text", DROPOUT), "tf-horovod": ("tf-horovod", "text", DROPOUT),
            "tf-horovod-tfrecord": ("tf-horovod", "digit_records",
                                    " ".join(TRAINING).replace("--loader-workers 1", "--loader-workers 2").split())}


@pytest.fixture(scope="module")
def digit_records(tmp_path_factory):
    """The handwritten digits as TFRecord shards (4 to train, 1 held out), as ImageNet's are written."""
    from bench.data.make import MakeConfig, make

    root = tmp_path_factory.mktemp("data") / "digit-records"
    make(MakeConfig(path=str(root), format="tfrecord", source="digits"))
    return root


# The TFRecord case resumes with another --loader-workers (1 for 2): a setting a resume may change, whose default
# follows each node's cores; the record order must not depend on it.
RESUMED_WORKERS = {"tf-horovod-tfrecord": "1"}


def resumed_args(case: str, args: list[str]) -> list[str]:
    out = list(args)
    if case in RESUMED_WORKERS:
        out[out.index("--loader-workers") + 1] = RESUMED_WORKERS[case]
    return out


# -- real runs ----------------------------------------------------------------------------------------------
# Each of the fixture's runs is bounded by its own timeout (tests.conftest.bench: 300 s, a deadlock guard); the test
# that sets the fixture up is bounded by their sum, never by one bound for all that a loaded machine breaks.
RUNS_BOUND = pytest.mark.timeout(len(IDENTITY) * 3 * 300 + 120)


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """Per case of IDENTITY: a run with a checkpoint after every epoch that loses a rank after the one of epoch 2 (its
    checkpoint stays), the run resumed from it, and one never interrupted. The lost run's $TMPDIR is a folder of
    its own, of a short path as /tmp's (pytest's are too deep for the loader's sockets inside a rank's own)."""
    done = {}
    for case, (mode, data, args) in IDENTITY.items():
        base = tmp_path_factory.mktemp(case)
        (base / "tmp").symlink_to(tempfile.mkdtemp(prefix="lost-", dir="/tmp"))
        on = ["--data", str(request.getfixturevalue(data))]
        lost = bench(mode, *args, *on, "--checkpoint-every", "1", "--output", str(base / "lost"),
                     HVDBENCH_HOOKS=json.dumps({"lost_after_checkpoint": 2}), TMPDIR=str((base / "tmp").resolve()))
        (folder,) = (base / "lost" / "checkpoints").glob(f"{mode}-np2-*")  # one per configuration (its key)
        resumed = bench(mode, *resumed_args(case, args), *on, "--resume-from", str(folder), "--output",
                        str(base / "resumed"))
        whole = bench(mode, *args, *on, "--checkpoint-every", "1", "--output", str(base / "whole"))
        done[case] = (base, folder, lost, resumed, whole)
    yield done
    for base, *_ in done.values():
        shutil.rmtree((base / "tmp").resolve(), ignore_errors=True)


@RUNS_BOUND
@pytest.mark.horovod
@pytest.mark.parametrize("case", IDENTITY)
def test_a_run_that_lost_a_rank_resumes_from_its_checkpoint_and_ends_as_if_never_stopped(runs, case):
    base, folder, lost, resumed, whole = runs[case]
    assert lost.returncode != 0 and "no result written" in lost.stderr, lost.stderr[-2000:]
    assert "epoch 2: checkpoint written to" in lost.stderr
    assert not list((base / "lost").glob("*.json"))
    assert json.loads((folder / checkpoint.STATE).read_text())["epoch"] == 2
    # what the lost rank and the one stopped beside it left in the temporary folder: their own folders alone
    # (TensorFlow's autograph files, the loader's fork server socket: bench.scratch), gone at a later start
    assert scratch.remove_orphaned(base / "tmp", scratch.PREFIX, min_age_s=0)
    assert [p.name for p in (base / "tmp").iterdir() if not p.name.startswith("torchinductor_")] == []  # PyTorch's
    # compile cache stays, as it does between runs
    for proc in (resumed, whole):
        assert proc.returncode == 0, proc.stderr[-3000:]
    again, never = only_result(base / "resumed"), only_result(base / "whole")
    # the same steps on the same batches at the same rates: the same parameters, bit for bit
    assert again["sync"]["param_checksums"][0] == never["sync"]["param_checksums"][0]
    t, n = again["training"], never["training"]
    assert [c["epoch"] for c in t["curve"]] == [1, 2, 3] and t["curve"][-1]["top1"] == n["curve"][-1]["top1"]
    assert t["resumed"][0]["epoch"] == 2 and t["resumed"][0]["from"] == str(folder)
    # the time up to the checkpoint once, then this run's: later than the checkpoint, never the lost run's end
    assert t["curve"][2]["wall_s"] > t["resumed"][0]["wall_s"] >= t["curve"][1]["wall_s"]
    assert [len(w) for w in again["samples"]["window_s"]] == [1, 1]  # each rank's timed windows: epoch 3 only
    assert [c["epoch"] for c in n["checkpoints"]] == [1, 2] and n["checkpoint_s_total"] > 0
    # every batch the ranks drew trained the epochs the curve counts: no untimed steps beside them
    drawn = [p["epochs"] * n["steps_per_epoch"] * never["config"]["batch_size"] for p in never["input"]["per_rank"]]
    assert sum(drawn) == pytest.approx(n["curve"][-1]["samples"]), drawn
    assert "│ resumed" in resumed.stdout and "epoch 2" in resumed.stdout  # the table's row


@RUNS_BOUND
def test_resuming_another_configuration_is_refused_before_any_rank_starts(runs, text, tmp_path):
    _, folder, *_ = runs["torch-ddp"]
    args = [a if a != "32" else "16" for a in DROPOUT]
    r = bench("torch-ddp", *args, "--data", str(text), "--resume-from", str(folder), "--output", str(tmp_path))
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"error: --resume-from {folder}: the checkpoint is of another configuration (--batch-size 32 there, 16 here)"]
    assert not list(tmp_path.iterdir())


def test_a_fixed_time_run_stops_after_the_epoch_that_ends_past_the_time_and_evaluates_it(digits, tmp_path):
    """... and writes its checkpoint there (a --duration sized to a job's time limit is where one is wanted most;
    --checkpoint-every 28 would write none before), from which the next job resumes with the whole budget."""
    args = [a if a != str(EPOCHS) else "30" for a in TRAINING]
    r = bench("torch-ddp", *args, "--data", str(digits), "--duration", "4", "--checkpoint-every", "28", "--output",
              str(tmp_path / "first"))
    assert r.returncode == 0, r.stderr[-3000:]
    t = only_result(tmp_path / "first")["training"]
    assert t["stopped"] == "duration" and t["duration_s"] == 4 and t["epochs_run"] < 28
    assert [c["epoch"] for c in t["checkpoints"]] == [t["epochs_run"]]
    (folder,) = (tmp_path / "first" / "checkpoints").glob("torch-ddp-np2-*")
    again = bench("torch-ddp", *args, "--data", str(digits), "--duration", "6", "--checkpoint-every", "28",
                  "--resume-from", str(folder), "--output", str(tmp_path / "next"))
    assert again.returncode == 0, again.stderr[-3000:]
    n = only_result(tmp_path / "next")["training"]
    assert n["resumed"][-1]["epoch"] == t["epochs_run"] and n["stopped"] in ("duration", "epochs")
    after = [c for c in n["curve"] if c["epoch"] > t["epochs_run"]]  # the time goes on from the checkpoint's
    assert after and after[0]["epoch"] == t["epochs_run"] + 1 and after[0]["wall_s"] > t["curve"][-1]["wall_s"]
    tmp_path = tmp_path / "first"
    # each epoch's end (its evaluation's wall time less the evaluation): before 4 s but the last, evaluated too;
    # a second either side for the ranks' clocks (the stop is the slowest rank's)
    ends = [c["wall_s"] - c["eval_s"] for c in t["curve"]]
    assert [c["epoch"] for c in t["curve"]] == list(range(1, t["epochs_run"] + 1))
    assert ends[-1] >= 4 - 1 and all(end < 4 + 1 for end in ends[:-1]), ends
    assert "time up" in r.stdout
