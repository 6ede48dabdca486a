"""Training from a dataset (--data): the run options' checks in one line, the input section's formulas, bench
compare's input cost, and real runs of both frameworks' pipelines (one shared run per framework)."""


import dataclasses

import pytest

from bench.config import RunConfig
from bench.data import feed
from bench.data.make import MakeConfig, make
from bench.errors import BenchError
from tests import samples


@pytest.mark.parametrize("args, message", [
    ({"mode": "torch-ddp", "loader": "torch"}, "--loader applies to runs with --data PATH"),
    ({"mode": "torch-ddp", "loader_workers": 2}, "--loader-workers applies to runs with --data PATH"),
    ({"mode": "torch-hybrid", "model": "transformer-small", "data": "JPEGS"},
     "holds images; transformer-small trains on sequences"),
    ({"mode": "torch-ddp", "model": "transformer-base", "data": "JPEGS"}, "holds images; transformer-base trains on"),
    ({"mode": "torch-ddp", "data": "JPEGS", "loader": "tf"}, "--loader tf feeds tensorflow; torch-ddp is torch"),
    ({"mode": "tf-horovod", "data": "JPEGS", "loader": "nvjpeg"}, "unknown --loader 'nvjpeg'"),
    ({"mode": "torch-ddp", "data": "NOWHERE"}, "no such file or folder"),
    ({"mode": "torch-ddp", "data": "JPEGS", "loader_workers": -1}, "--loader-workers must be an integer >= 0"),
])
def test_data_options_refuse_what_cannot_run_in_one_line(jpegs, tmp_path, args, message):
    args = {k: str(jpegs) if v == "JPEGS" else str(tmp_path / "none") if v == "NOWHERE" else v
            for k, v in args.items()}
    with pytest.raises(BenchError, match=message):
        RunConfig(**args)


def test_dali_feeds_either_framework(jpegs):
    assert RunConfig(mode="torch-ddp", data=str(jpegs), loader="dali").loader == "dali"
    assert RunConfig(mode="tf-horovod", data=str(jpegs), loader="dali").loader == "dali"


def test_a_tokens_dataset_trains_the_text_models_only(tmp_path):
    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", images=20, classes=50, seq_len=8))
    with pytest.raises(BenchError, match="holds token ids; vgg16 trains on images and reads an image dataset"):
        RunConfig(mode="torch-ddp", data=str(tmp_path / "t"))
    cfg = RunConfig(mode="torch-hybrid", model="transformer-small", data=str(tmp_path / "t"), seq_len=4,
                    epochs=2, batch_size=2).resolve("cpu", 2)
    assert cfg.num_classes == 50 and cfg.loader == "torch"  # the vocabulary from meta.json
    assert cfg.steps_per_window == (16 * 8 - 1) // 8 // 2 // 2  # samples of 2 x 4 + 1 tokens, per rank, batch 2


def test_parameter_servers_scale_the_rate_by_one_workers_batch(jpegs):
    """Asynchronous ps: each update applies one worker's batch; every other mode's, all ranks' batches."""
    ps = RunConfig(mode="tf-native", strategy="ps", data=str(jpegs), epochs=2, batch_size=4).resolve("cpu", 2)
    ddp = RunConfig(mode="torch-ddp", data=str(jpegs), epochs=2, batch_size=4).resolve("cpu", 2)
    assert ps.learning_rate == pytest.approx(0.1 * 4 / 256) and ddp.learning_rate == pytest.approx(0.1 * 8 / 256)


def test_a_data_run_takes_the_datasets_classes_and_its_frameworks_loader(jpegs):
    torch_cfg = RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2)
    assert torch_cfg.num_classes == 4 and torch_cfg.loader == "torch"
    assert RunConfig(mode="tf-horovod", data=str(jpegs)).resolve("cpu", 2).loader == "tf"
    assert RunConfig(mode="torch-ddp").resolve("cpu", 2).loader is None  # synthetic: no loader


def test_the_parent_checks_samples_and_classes_before_any_rank_starts(jpegs):
    assert feed.check(RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2))["train_samples"] == 40
    with pytest.raises(BenchError, match="fewer than 3 rank"):
        feed.check(RunConfig(mode="torch-ddp", data=str(jpegs), batch_size=16).resolve("cpu", 3))
    with pytest.raises(BenchError, match="has 4 classes; --num-classes 3 is fewer"):
        feed.check(RunConfig(mode="torch-ddp", data=str(jpegs), num_classes=3).resolve("cpu", 2))


def rank(r, waits, windows=(1.0, 1.0)):
    return samples.rank(r, window_s=list(windows),
                        input=samples.fed(waits, loader_rate=100.0 + r))


def test_the_input_section_gives_each_ranks_wait_share_and_the_rank_that_sets_the_pace(jpegs):
    cfg = RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2)
    section = feed.section(cfg, [rank(0, [0.01, 0.01]), rank(1, [0.2, 0.1, 0.0])])
    assert [p.wait_share for p in section.per_rank] == pytest.approx([0.01, 0.15])
    assert section.paced_by_rank == 1 and section.wait_share_max == pytest.approx(0.15)
    assert section.per_rank[1].wait_step_s == [0.2, 0.1, 0.0]  # the raw waits are kept
    calm = feed.section(cfg, [rank(0, [0.01]), rank(1, [0.05, 0.1])])
    assert calm.paced_by_rank is None  # 7.5% < 10%
    assert feed.section(RunConfig(mode="torch-ddp").resolve("cpu", 2), []).source == "synthetic"
    rows = dict((label, value) for label, value, _ in feed.table_rows(section))
    assert rows["input sets the pace"] == "rank 1" and rows["data wait, share of step (max rank)"] == "15.0"


def test_on_a_gpu_the_pace_is_judged_by_the_devices_idle_and_the_hosts_wait_stays_as_its_own_figure(jpegs):
    """Issue 92, item 2: DDP on a GPU, where the host waits 78% of each step for batches while the device, busy
    with the step it queued, sits idle for 7% of it. The input does not set the pace (7% < 10%); both shares are
    in the section and the table. Before, the host's 78% named the rank as input-paced."""
    cfg = RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2)
    gpu = [samples.rank(r, window_s=[1.0, 1.0], input=samples.fed([0.78, 0.78], idle_step_s=[0.07, 0.07]))
           for r in (0, 1)]
    section = feed.section(cfg, gpu)
    assert section.wait_share_max == pytest.approx(0.78) and section.idle_share_max == pytest.approx(0.07)
    assert section.paced_by_rank is None and section.per_rank[0].input_share == pytest.approx(0.07)
    assert section.per_rank[0].idle_step_s == [0.07, 0.07]  # the raw idles are kept
    rows = dict((label, value) for label, value, _ in feed.table_rows(section))
    assert rows["device idle for data, share of step (max rank)"] == "7.0" and rows["input sets the pace"] == "no"
    slow = [samples.rank(0, window_s=[1.0, 1.0], input=samples.fed([0.5, 0.5], idle_step_s=[0.3, 0.3]))]
    assert feed.section(cfg, slow).paced_by_rank == 0  # 30% idle: paced by its input


def test_the_input_cost_is_the_share_of_synthetic_throughput_lost():
    from bench.commands.compare import input_cost

    assert input_cost("synthetic", "imagefolder via torch", 100.0, 80.0) == pytest.approx(0.2)
    assert input_cost("imagefolder via torch", "synthetic", 80.0, 100.0) == pytest.approx(0.2)
    assert input_cost("synthetic", "synthetic", 100.0, 80.0) is None


def test_a_feed_reads_a_copys_device_time_after_the_windows_never_during_a_step():
    """On a GPU the batch's copy is only queued during the step (bench.modes.torch_common.to_device: a side
    stream and CUDA events); the feed keeps each copy's reading deferred and reads it when the record is made, so
    no step waits for the device, and the step's wait is the host's alone (a fake device here: no GPU)."""
    from types import SimpleNamespace

    read = []

    def copy_time():  # what TorchTrainer.last_copy_time gives: a reading of the copy's events, deferred
        return lambda: read.append(1) or 0.01

    class Clock:  # what TorchTrainer's DeviceIdle gives: events at the ask and the hand-over, read later
        def asked(self):
            read.append("asked")  # recorded, not read

        def handed(self):
            return lambda: read.append("idle") or 0.002

    fed = feed.Feed.__new__(feed.Feed)
    fed.cfg, fed.copies, fed.copy_time, fed.place = SimpleNamespace(data="d"), True, copy_time, lambda host: host
    fed.wait_s, fed.h2d_s, fed._batches = [], [], iter([("batch", 1)] * 3)
    fed.device_clock, fed.idle_s = Clock(), []
    fed.dataset = SimpleNamespace(train=[], format="imagefolder", classes=2)
    fed.loader_rate, fed.workers, fed.per_epoch = 100.0, 1, None
    fed.queue_at_start, fed.settle_steps = None, 0
    for _ in range(3):
        assert fed.next() == ("batch", 1)
    assert read == ["asked"] * 3  # nothing read while the steps ran
    record = fed.record(1)
    assert record.h2d_step_s == [0.01, 0.01] and len(record.wait_step_s) == 2 and read.count(1) == 2
    assert record.idle_step_s == [0.002, 0.002] and read.count("idle") == 2
    fed.copies, fed.device_clock = False, None  # a CPU run: no copy kept, no device idle
    assert fed.record(0).h2d_step_s is None and fed.record(0).idle_step_s is None


def test_a_feed_reads_its_device_readings_after_each_window_so_a_long_run_keeps_no_events(monkeypatch):
    """Each step's copy and idle readings hold CUDA events until read; read_deferred (after each window's sync,
    bench.measure.loop) turns the steps so far into seconds, each reading read once, so a run of many epochs does
    not keep two events per step alive to its end; the record gives the same figures."""
    from types import SimpleNamespace

    reads = []

    class Clock:
        def asked(self):
            pass

        def handed(self):
            step = len(reads) + 100
            return lambda: reads.append(step) or 0.002

    fed = feed.Feed.__new__(feed.Feed)
    fed.cfg, fed.copies, fed.place = SimpleNamespace(data="d"), True, lambda host: host
    fed.copy_time = lambda: (lambda: reads.append("copy") or 0.01)
    fed.wait_s, fed.h2d_s, fed.idle_s, fed._read = [], [], [], 0
    fed._batches, fed.device_clock = iter([("batch", 1)] * 6), Clock()
    fed.dataset = SimpleNamespace(train=[], format="imagefolder", classes=2)
    fed.loader_rate, fed.workers, fed.per_epoch, fed.queue_at_start, fed.settle_steps = 100.0, 1, None, None, 0
    for window in range(2):
        for _ in range(3):
            fed.next()
        fed.read_deferred()
        assert not any(callable(x) for x in fed.h2d_s + fed.idle_s)  # no event left to hold
        assert reads.count("copy") == 3 * (window + 1)  # each reading once
    record = fed.record(1)
    assert record.h2d_step_s == [0.01] * 5 and record.idle_step_s == [0.002] * 5
    assert reads.count("copy") == 6  # the record read nothing again


def test_the_loader_rate_probe_reads_its_clock_after_the_device_ran_the_batches_it_queued(monkeypatch):
    """DALI on a GPU hands its batches over on the device, their copies only queued: the probe's clock is read
    once the device has run them, at both edges (a fake device clock here); on a CPU (no device clock) it is the
    host's alone."""
    from types import SimpleNamespace

    events = []

    class Clock:
        def synchronize(self):
            events.append("sync")

    def batches():
        while True:
            events.append("batch")
            yield ("batch", 1)

    monkeypatch.setattr(feed, "PROBE_S", 0.0)
    fed = feed.Feed.__new__(feed.Feed)
    fed.cfg, fed.workers, fed.device_clock = SimpleNamespace(data="d", batch_size=4), 0, Clock()
    fed._open = lambda epoch, epochs: batches()
    assert fed._probe() > 0
    skip = 2 * 1 + 1
    assert events == ["batch"] * skip + ["sync"] + ["batch"] * feed.PROBE_BATCHES + ["sync"]
    events.clear()
    fed.device_clock = None
    assert fed._probe() > 0 and "sync" not in events


class FakeQueue:
    """A pipeline whose queue holds the next of ``readings`` batches of ``depth`` made ahead at each look
    (bench.data.loaders.Queued's face)."""

    def __init__(self, readings, depth):
        self.readings, self.depth = list(readings), depth

    def ready(self):
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


@pytest.mark.parametrize("readings, depth, settled_after", [
    ([0], 4, 0),                      # empty after the warm-up: training waits for the pipeline already
    ([4, 3, 2, 1, 0], 4, 4),          # made during set-up, drained by a pipeline slower than training
    ([4, 4, 4, 4, 4], 4, 4),          # full and held so over 4 steps: the pipeline keeps up
    ([3, 2, 3, 2, 3, 2], 4, 4),       # held nearly full: keeps up, a batch still in making at each look
    ([8, 7, 7, 6, 6, 5, 5, 4, 4, 4, 3], 4, 14),  # drained slowly: steady once it held 4 steps (at 3)
    ([None], 4, 0),                   # a queue that cannot tell its size: no settling
    ([0], 0, 0),                      # no workers: nothing made ahead
])
def test_the_timed_windows_start_when_the_input_queue_has_stopped_draining(readings, depth, settled_after):
    """The settling loop of bench.measure.loop: untimed steps while the queue is not steady, at most 4 x its
    depth; a full queue is not steady until it has held (a slow pipeline leaves it full after set-up)."""
    fed = feed.Feed.__new__(feed.Feed)
    fed._batches, fed.readings = FakeQueue(readings, depth), []
    limit = fed.settle_limit()
    assert limit == feed.SETTLE_DEPTHS * depth
    steps = 0
    while steps < limit and not fed.steady():
        steps += 1
    assert steps == settled_after
    fed.started(steps)
    assert (fed.queue_at_start, fed.settle_steps) == (fed.ready(), settled_after)
    fed._batches = iter([])  # the tf and DALI pipelines: no queue to read, never settled
    assert fed.steady() and fed.settle_limit() == 0 and fed.ready() is None


def test_the_input_section_keeps_each_ranks_queue_when_the_clock_started(jpegs):
    cfg = RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2)
    ranks = [rank(0, [0.01]), rank(1, [0.2])]
    first, second = (r.parts["input"] for r in ranks)
    ranks[0].parts["input"] = dataclasses.replace(first, queue_at_start=4, queue_depth=4, settle_steps=0)
    ranks[1].parts["input"] = dataclasses.replace(second, queue_at_start=0, queue_depth=4, settle_steps=7)
    section = feed.section(cfg, ranks)
    assert [(p.queue_at_start, p.queue_depth, p.settle_steps) for p in section.per_rank] == \
        [(4, 4, 0), (0, 4, 7)]
    assert section.settle_steps == 7 and "queue_at_start" in section.definition



def test_a_queue_still_draining_when_the_clock_started_warns_when_it_is_a_share_of_the_timed_steps(jpegs):
    """A rank whose settling stopped at its limit (4 x its depth) with batches still queued hands the clock batches
    made before it: above 10% of the timed steps that is one warning line; a queue that settled (steady or empty:
    fewer steps than the limit), a small share, or a synthetic run says nothing."""
    cfg = RunConfig(mode="torch-ddp", data=str(jpegs)).resolve("cpu", 2)
    ranks = [rank(0, [0.01]), rank(1, [0.01])]

    def warned(queued: int, settle_steps: int, timed: int) -> str | None:
        ranks[1].parts["input"] = dataclasses.replace(ranks[1].parts["input"], queue_at_start=queued, queue_depth=22,
                                            settle_steps=settle_steps)
        return feed.queue_warning(feed.section(cfg, ranks), timed)

    line = warned(13, 88, 100)
    assert line.startswith("warning: rank 1's input queue still held 13 of its 22 batches after 88 settling steps, "
                           "13% of the 100 timed steps") and "\n" not in line
    assert warned(13, 40, 100) is None  # settled before the limit: steady, no inflation
    assert warned(13, 88, 200) is None  # 6.5% of the timed steps
    assert warned(0, 88, 100) is None  # emptied: the pipeline sets the pace, no batch ahead
    assert feed.queue_warning(None, 100) is None
