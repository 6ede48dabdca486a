"""The GPU input path's stream discipline (TorchTrainer.to_device, docs/data-pipelines.md), on a fake CUDA: a
stream that reads a tensor waits for the stream that wrote it, and a tensor used on another stream is recorded
there. No GPU here: the fake logs each wait, record and read with the stream current at the time."""

import statistics
from types import SimpleNamespace

import pytest
import torch

from bench.modes.torch_common import TorchTrainer


class FakeCuda:
    """torch.cuda's streams and events, logging: ("wait", waiter, waited), ("record", tensor, stream),
    ("read", tensor, stream), ("event", stream)."""

    def __init__(self):
        self.log, self.current = [], "compute"
        self.streams = {"compute": self.Stream(self, "compute")}

    class Stream:
        def __init__(self, cuda, name):
            self.cuda, self.name = cuda, name

        def wait_stream(self, other):
            self.cuda.log.append(("wait", self.name, other.name))

    def stream_of(self, _device=None):
        return self.streams[self.current]

    def new_stream(self, _device=None):
        return self.streams.setdefault("copy", self.Stream(self, "copy"))

    def event(self, enable_timing=False):
        cuda = self
        return SimpleNamespace(record=lambda: cuda.log.append(("event", cuda.current)))

    def stream(self, s):
        cuda = self

        class Current:
            def __enter__(self):
                self.before, cuda.current = cuda.current, s.name

            def __exit__(self, *exc):
                cuda.current = self.before
        return Current()


class FakeTensor:
    def __init__(self, cuda, name, where, dtype=torch.float32):
        self.cuda, self.name, self.dtype = cuda, name, dtype
        self.device = torch.device("cuda", 0) if where == "cuda" else torch.device("cpu")

    def _read(self, made, dtype=torch.float32):
        self.cuda.log.append(("read", self.name, self.cuda.current))
        return FakeTensor(self.cuda, made, "cuda", dtype)

    def to(self, device, non_blocking=False):
        return self if self.device.type == "cuda" else self._read(f"{self.name} on the device", self.dtype)

    def contiguous(self, memory_format=None):
        return self._read(f"{self.name} nhwc")

    def float(self):
        return self._read(f"{self.name} float")

    def sub_(self, _):
        return self

    def div_(self, _):
        return self

    def record_stream(self, s):
        self.cuda.log.append(("record", self.name, s.name))


@pytest.fixture
def cuda(monkeypatch):
    fake = FakeCuda()
    monkeypatch.setattr(torch.cuda, "Stream", fake.new_stream)
    monkeypatch.setattr(torch.cuda, "current_stream", fake.stream_of)
    monkeypatch.setattr(torch.cuda, "Event", fake.event)
    monkeypatch.setattr(torch.cuda, "stream", fake.stream)
    monkeypatch.setattr(torch, "tensor", lambda v, device=None: SimpleNamespace(view=lambda *s: v))
    return fake


def trainer(channels_last: bool) -> TorchTrainer:
    t = object.__new__(TorchTrainer)
    t.device, t.cfg = torch.device("cuda", 0), SimpleNamespace(channels_last=channels_last)
    t._copy_stream = t._pixel_scale = t._last_copy = None
    return t


def test_a_batch_dali_wrote_on_the_compute_stream_is_read_on_the_copy_stream_only_after_that_write(cuda):
    """--tuned --loader dali on a GPU: DALI's output, written on the compute stream, is made channels-last on the
    copy stream. Before, the copy stream never waited for the compute stream and the source was not recorded on
    it: the conversion could read pixels not yet written, or memory already given to another tensor."""
    images, labels = FakeTensor(cuda, "dali", "cuda"), FakeTensor(cuda, "labels", "cpu", torch.int64)
    data, target = trainer(channels_last=True).to_device((images, labels))
    log = cuda.log
    first_read = log.index(("read", "dali", "copy"))  # the conversion, on the copy stream
    assert ("wait", "copy", "compute") in log[:first_read]
    assert ("record", "dali", "copy") in log
    # and the batch the step uses, made on the copy stream, is waited for and recorded on the compute stream
    assert log.index(("wait", "compute", "copy")) > first_read
    assert ("record", data.name, "compute") in log and ("record", target.name, "compute") in log


def test_a_host_batch_is_copied_and_normalised_on_the_copy_stream_between_its_events(cuda):
    """The torch loader's uint8 batch: copied between the copy's two events, normalised after them (outside the
    copy's time), all on the copy stream; the compute stream waits for it. A host tensor needs no wait."""
    images, labels = FakeTensor(cuda, "pixels", "cpu", torch.uint8), FakeTensor(cuda, "labels", "cpu", torch.int64)
    data, _ = trainer(channels_last=False).to_device((images, labels))
    log = cuda.log
    events = [i for i, e in enumerate(log) if e == ("event", "copy")]
    assert len(events) == 2
    copied, normalised = log.index(("read", "pixels", "copy")), log.index(("read", "pixels on the device", "copy"))
    assert events[0] < copied < events[1] < normalised < log.index(("wait", "compute", "copy"))
    assert ("wait", "copy", "compute") not in log and ("record", data.name, "compute") in log


class Timeline:
    """One rank on a fake GPU: the host's clock, and the time until which the compute stream is busy. An event
    recorded on the compute stream passes when the stream has run what was queued before it, or when the host
    records it, if later (as CUDA's)."""

    def __init__(self):
        self.host, self.device = 0.0, 0.0

    def queue_step(self, device_s: float, launch_s: float = 0.002) -> None:
        self.device = max(self.device, self.host) + device_s
        self.host += launch_s

    def event(self, enable_timing=False):
        timeline = self

        class Event:
            def record(self, stream=None):
                self.t = max(timeline.device, timeline.host)

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return 1000 * (other.t - self.t)
        return Event()


def run_steps(monkeypatch, ready_at: list[float], step_s: float, copy_s: float = 0.001):
    """Feed.next over batches the loader has ready at ``ready_at`` (host seconds), each step queuing ``step_s`` of
    device work after it: each step's host wait and device idle."""
    from bench.data import feed as feed_module
    from bench.data.feed import Feed
    from bench.modes.torch_common import DeviceIdle

    timeline = Timeline()
    monkeypatch.setattr(torch.cuda, "Event", timeline.event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
    monkeypatch.setattr(feed_module.time, "perf_counter", lambda: timeline.host)

    def batches():
        for t in ready_at:
            timeline.host = max(timeline.host, t)  # the host waits for the loader's batch
            yield t

    def place(batch):  # the copy on the side stream from now; the compute stream waits for it
        timeline.device = max(timeline.device, timeline.host + copy_s)
        return batch

    feed = object.__new__(Feed)
    feed.cfg, feed._batches, feed.place, feed.copy_time = SimpleNamespace(data="d"), batches(), place, None
    feed.wait_s, feed.h2d_s, feed.idle_s = [], [], []
    feed.device_clock = DeviceIdle(torch.device("cuda", 0))
    for _ in ready_at:
        feed.next()
        timeline.queue_step(step_s)
    return feed.wait_s, [reading() for reading in feed.idle_s]


def test_a_loader_faster_than_the_device_costs_it_nothing_while_the_host_waits(monkeypatch):
    """DDP on a GPU (no sync per step): the host queues a 100 ms step and waits 60 ms for the next batch, which is
    ready long before the device has run the step. The host's wait is most of each step; the device's idle is 0."""
    waits, idles = run_steps(monkeypatch, [0.062 * k for k in range(20)], step_s=0.1)
    assert statistics.median(waits[5:]) > 0.05
    assert max(idles[5:]) == pytest.approx(0, abs=1e-9)


def test_a_loader_slower_than_the_device_costs_it_the_gap(monkeypatch):
    """A batch every 150 ms against a 100 ms step: the device sits idle for the 50 ms between, its batch's 1 ms
    copy included (the host's wait is the period less its 2 ms launch of the step)."""
    waits, idles = run_steps(monkeypatch, [0.15 * k for k in range(20)], step_s=0.1)
    assert statistics.median(idles[5:]) == pytest.approx(0.15 - 0.1, abs=1e-6)
    assert statistics.median(waits[5:]) == pytest.approx(0.15 - 0.002, abs=1e-6)


def test_a_full_queue_costs_neither_the_host_nor_the_device(monkeypatch):
    waits, idles = run_steps(monkeypatch, [0.0] * 20, step_s=0.1)
    assert max(waits) == 0 and max(idles[1:]) == pytest.approx(0, abs=1e-9)
