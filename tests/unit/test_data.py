"""Datasets on disk (bench.data): bench data make in every format, the datasets read back and sharded, both
loaders' batches, bad input in one line, and bench data bench end to end."""

import json
import os
import pickle

import numpy as np
import pytest

from bench.data import formats
from bench.data.datasets import check_unchanged, load, shard, shard_size, state
from bench.data.make import MakeConfig, make
from bench.errors import BenchError


def small(path, **kw):
    return make(MakeConfig(path=str(path), **{"images": 24, "image_size": 48, **kw}))


@pytest.mark.parametrize("args, message", [
    ({"format": "jpeg"}, "--format takes imagefolder, tfrecord, cifar, tokens"),
    ({"source": "web"}, "--from takes synthetic, digits or text"),
    ({"source": "text"}, "--from text makes token ids: --format tokens"),
    ({"source": "digits", "format": "tokens"}, "--from digits makes images"),
    ({"images": 0}, "--images must be >= 1"),
    ({"val_fraction": 1.0}, "--val-fraction must be between 0 and 1"),
    ({"format": "cifar", "image_size": 64}, "the cifar format holds 32 x 32 images"),
])
def test_make_refuses_bad_input_in_one_line(tmp_path, args, message):
    with pytest.raises(BenchError, match=message):
        MakeConfig(path=str(tmp_path / "d"), **args)
    assert not (tmp_path / "d").exists()


def test_make_writes_an_imagefolder_whole_and_never_over_a_dataset(tmp_path):
    record = small(tmp_path / "d")
    assert record["counts"] == {"train": 19, "val": 5} and record["format"] == "imagefolder"
    files = sorted((tmp_path / "d" / "train").rglob("*.JPEG"))
    assert len(files) == 19 and files[0].read_bytes()[:2] == b"\xff\xd8"  # JPEG
    assert formats.detect(tmp_path / "d").name == "imagefolder"
    with pytest.raises(BenchError, match="exists and is not an empty folder; not overwritten"):
        small(tmp_path / "d")
    again = small(tmp_path / "e")  # deterministic by seed: the same bytes
    assert [f.read_bytes() for f in sorted((tmp_path / "e" / "train").rglob("*.JPEG"))] == \
        [f.read_bytes() for f in files] and again["counts"] == record["counts"]
    assert not list(tmp_path.glob(".*.making"))


def test_imagenet_sized_jpegs_weigh_what_imagenets_do(tmp_path):
    """The default synthetic image: 500 x 375 at quality 90, about ImageNet's 108 KB a file."""
    make(MakeConfig(path=str(tmp_path / "d"), images=12))
    sizes = [f.stat().st_size for f in (tmp_path / "d").rglob("*.JPEG")]
    assert 90_000 < np.mean(sizes) < 130_000, np.mean(sizes)


def test_cifar_and_tokens_follow_their_formats(tmp_path):
    small(tmp_path / "c", format="cifar", images=40, image_size=None)
    with open(tmp_path / "c" / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        batch = pickle.load(f, encoding="bytes")
    assert batch[b"data"].dtype == np.uint8 and batch[b"data"].shape[1] == 3072
    data = load(tmp_path / "c")
    assert data.format == "cifar" and len(data.train) == 32 and len(data.val) == 8
    assert data.train.arrays.shape[1:] == (32, 32, 3)
    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", images=10, seq_len=16, classes=1000))
    ids = np.fromfile(tmp_path / "t" / "train.bin", dtype=np.uint16)
    assert len(ids) == 8 * 16 and ids.max() < 1000 and formats.detect(tmp_path / "t").name == "tokens"


def test_a_tokens_dataset_is_read_as_sequences_and_their_continuations(tmp_path):
    """Sample i of seq_len L: source tokens [2Li, 2Li + L), the decoder's input the next L, its targets those one
    on; the last token of a window is only a target (the next sample starts there)."""
    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", images=10, seq_len=16, classes=1000))
    ids = np.fromfile(tmp_path / "t" / "train.bin", dtype=np.uint16)
    data = load(tmp_path / "t", seq_len=4)
    train = data.train
    assert data.classes == 1000 and len(train) == (len(ids) - 1) // 8
    pair, target = train.sample(3)
    assert pair.tolist() == [ids[24:28].tolist(), ids[28:32].tolist()] and target.tolist() == ids[29:33].tolist()
    with pytest.raises(BenchError, match="a tokens dataset trains the text models"):
        load(tmp_path / "t")
    # an id outside the vocabulary: refused when its sample is read, never by a scan of the whole file at load
    (tmp_path / "t" / "val.bin").write_bytes(np.array([5] * 9 + [1000] + [5] * 8, np.uint16).tobytes())
    val = load(tmp_path / "t", seq_len=4).val
    assert val.sample(0)[1].tolist() == [5] * 4
    with pytest.raises(BenchError, match=r"val.bin holds token id 1000 \(sample 1\), outside the vocabulary 0..999"):
        val.sample(1)
    (tmp_path / "t" / "val.bin").write_bytes(b"abc")
    with pytest.raises(BenchError, match="not a whole number of uint16 token ids"):
        load(tmp_path / "t", seq_len=4)


def test_a_token_split_travels_to_a_loader_worker_by_its_path(tmp_path):
    """A loader's workers start from a fork server (bench.data.loaders.worker_start) and receive the split
    pickled: a memory-mapped token file goes as its path and is mapped again there, never copied."""
    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", images=200, seq_len=64, classes=1000))
    train = load(tmp_path / "t", seq_len=16).train
    sent = pickle.dumps(train)
    again = pickle.loads(sent)
    assert len(sent) < 1000 < train.tokens.nbytes and isinstance(again.tokens, np.memmap)
    assert again.tokens.filename == train.tokens.filename and len(again) == len(train)
    assert all((a == b).all() for a, b in zip(again.sample(7), train.sample(7), strict=True))


def test_text_is_real_bytes_a_model_can_read(tmp_path):
    """--from text: Python's help texts, one token per byte, the held-out part the last piece of the text."""
    record = make(MakeConfig(path=str(tmp_path / "x"), format="tokens", source="text", images=100, seq_len=32))
    train = np.fromfile(tmp_path / "x" / "train.bin", dtype=np.uint16)
    val = np.fromfile(tmp_path / "x" / "val.bin", dtype=np.uint16)
    assert record["classes"] == 256 and record["counts"] == {"train": 2560, "val": 640}
    text = bytes(np.concatenate([train, val]).astype(np.uint8)).decode()
    assert text.startswith('The "assert" statement') and " the " in text


def test_shards_are_disjoint_whole_batches_and_follow_the_seed():
    parts = [shard(103, r, 4, 5, seed=1) for r in range(4)]
    assert {len(p) for p in parts} == {25} and len(set(np.concatenate(parts))) == 100
    assert (shard(103, 0, 4, 5, seed=1) == parts[0]).all() and not (shard(103, 0, 4, 5, seed=2) == parts[0]).all()
    assert not (shard(103, 0, 4, 5, seed=1, epoch=1) == parts[0]).all()  # another epoch, another order
    with pytest.raises(BenchError, match="the split has 7 samples: fewer than 4 rank\\(s\\) x batch 2"):
        shard(7, 0, 4, 2, seed=0)
    # the count each rank takes, told without drawing the order: every rank's shard has exactly that many
    for n, world, batch in [(103, 4, 5), (1797, 3, 32), (64, 2, 32), (1_281_167, 8, 256)]:
        assert {len(shard(n, r, world, batch, seed=0)) for r in range(world)} == {shard_size(n, world, batch)}


def test_bad_datasets_are_one_line(tmp_path):
    with pytest.raises(BenchError, match="no such file or folder"):
        formats.detect(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchError, match="the folder is empty"):
        formats.detect(tmp_path / "empty")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "x.txt").write_text("x")
    with pytest.raises(BenchError, match="cannot tell its format"):
        formats.detect(tmp_path / "odd")
    small(tmp_path / "d")
    (tmp_path / "d" / "meta.json").write_text(json.dumps({"format": "cifar", "classes": 10}))
    with pytest.raises(BenchError, match="the training split has no samples"):
        load(tmp_path / "d")


def test_a_dataset_changed_during_a_run_is_named(tmp_path):
    """bench.data.datasets.state and check_unchanged: a file added to a class folder, a token file appended to,
    meta.json rewritten are each one line naming what changed; an untouched dataset passes."""
    small(tmp_path / "d")
    before = state(tmp_path / "d")
    check_unchanged(tmp_path / "d", before)
    extra = next((tmp_path / "d" / "train").iterdir()) / "new.JPEG"
    extra.write_bytes(b"x")
    with pytest.raises(BenchError, match=r"changed during the run \(train/n\d+\): the result would mix two datasets"):
        check_unchanged(tmp_path / "d", before)
    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", images=10, seq_len=16, classes=100))
    before = state(tmp_path / "t")
    with open(tmp_path / "t" / "train.bin", "ab") as f:
        f.write(b"\x01\x00")
    with pytest.raises(BenchError, match=r"\(train.bin\)"):
        check_unchanged(tmp_path / "t", before)


def _images(root, names):
    for name in names:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(b"")


def test_every_split_is_labelled_by_trains_class_folders(tmp_path):
    """One class map, train/'s folders sorted (hidden ones skipped), for val/ too: a class missing from val/ (which
    bench data make gives at small sizes) or a hidden folder shifts no label; a val class train/ lacks is refused."""
    _images(tmp_path, ["train/n01/a.JPEG", "train/n02/b.JPEG", "train/n03/c.JPEG", "train/.ipynb_checkpoints/x.JPEG",
                       "val/n01/d.JPEG", "val/n03/e.JPEG", "val/.hidden/f.JPEG"])
    data = load(tmp_path)
    assert data.classes == 3 and data.train.labels.tolist() == [0, 1, 2]
    assert [p.split("/")[-1] for p in data.val.paths] == ["d.JPEG", "e.JPEG"]
    assert data.val.labels.tolist() == [0, 2]  # n03 is class 2 in both splits
    _images(tmp_path, ["val/n09/g.JPEG"])
    with pytest.raises(BenchError, match=r"val/ holds classes that train/ has not \(n09\)"):
        load(tmp_path)


def test_a_flat_val_folder_is_read_with_its_label_file_as_imagenet_ships_it(tmp_path):
    """ImageNet's validation images come in one folder with a label list: val_labels.txt ('FILE CLASS'), or
    Kaggle's LOC_val_solution.csv; each class a folder name of train/."""
    _images(tmp_path, ["train/n01/a.JPEG", "train/n02/b.JPEG", "val/ILSVRC2012_val_00000001.JPEG",
                       "val/ILSVRC2012_val_00000002.JPEG"])
    with pytest.raises(BenchError, match="without class folders; put its labels beside it in val_labels.txt"):
        load(tmp_path)
    (tmp_path / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\nILSVRC2012_val_00000002,n01 1 2 3 4\nILSVRC2012_val_00000001,n02 5 6 7 8\n")
    assert load(tmp_path).val.labels.tolist() == [1, 0]
    (tmp_path / "val_labels.txt").write_text("ILSVRC2012_val_00000001.JPEG n01\nILSVRC2012_val_00000002.JPEG n02\n")
    assert load(tmp_path).val.labels.tolist() == [0, 1]  # val_labels.txt first
    (tmp_path / "val_labels.txt").write_text("ILSVRC2012_val_00000001.JPEG n01\n")
    with pytest.raises(BenchError, match=r"gives no class for 1 image\(s\) of val/ \(ILSVRC2012_val_00000002.JPEG\)"):
        load(tmp_path)
    (tmp_path / "val_labels.txt").write_text("ILSVRC2012_val_00000001.JPEG n01\nILSVRC2012_val_00000002.JPEG n07\n")
    with pytest.raises(BenchError, match=r"names classes that train/ has not \(n07\)"):
        load(tmp_path)


class _BurstyLoader:
    """A loader as the clock sees it: W workers hand over W batches together every ``period`` seconds, and the
    queue they filled during start-up (PREFETCH x W batches) arrives at once with the first round."""

    def __init__(self, clock, workers, period, batch_size):
        self.clock, self.workers, self.period, self.batch_size = clock, max(workers, 1), period, batch_size

    def batches(self, *args, **kwargs):
        from bench.commands.data import PREFETCH

        self.clock[0] += self.period  # start-up: the first round, and the prefetched queue with it
        for _ in range(max(PREFETCH * self.workers, self.workers)):
            yield np.zeros((self.batch_size, 1)), None
        while True:
            self.clock[0] += self.period
            for _ in range(self.workers):
                yield np.zeros((self.batch_size, 1)), None


@pytest.mark.parametrize("workers", [0, 1, 2, 4, 10])
def test_data_bench_counts_only_the_batches_made_inside_its_clock(monkeypatch, tmp_path, workers):
    """Worked example (issue: data bench overstates every rate): W workers making W batches of 4 every 0.5 s give
    8 W img/s (8 for none or one). Counting the batch that started the clock read +14% at one worker with the
    defaults; draining the prefetched queue inside the clock +33% at two and more near ten. Now exact."""
    from bench.commands import data

    clock = [0.0]
    monkeypatch.setattr(data.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(data, "loader", lambda name: _BurstyLoader(clock, workers, 0.5, 4))
    monkeypatch.setattr(data.formats, "detect", lambda path: formats.data_format("imagefolder"))
    cfg = data.DataBenchConfig(path=str(tmp_path), loaders=("torch",), batch_size=4)
    assert data.measure_once(cfg, None, "torch", workers, 0) == pytest.approx(8.0 * max(workers, 1))
    warmup, timed = data.lengths(cfg, workers)
    assert warmup >= max(cfg.warmup, data.PREFETCH * workers) and timed >= max(cfg.batches, data.ROUNDS * workers)
    assert warmup % max(workers, 1) == 0 and timed % max(workers, 1) == 0


class _RecordingLoader(_BurstyLoader):
    """The bursty loader, keeping how it was asked for its batches."""
    decodes_on_gpu = True

    def batches(self, *args, **kwargs):
        self.asked = kwargs
        return super().batches(*args, **kwargs)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_data_bench_decodes_on_the_gpu_it_resolved_and_waits_for_the_gpu_only_at_the_clocks_edges(monkeypatch,
                                                                                                   tmp_path, device):
    """A loader that decodes on a GPU (DALI) is asked for CUDA tensors on GPU 0, as a PyTorch run gets them, and the
    clock's two edges wait for the GPU, so its queued decoding of the timed batches is inside the clock and nothing
    is synchronised per batch (a fake GPU: this machine has none; the GPU check runs the real one)."""
    from bench.commands import data

    clock, synced = [0.0], []
    fake = _RecordingLoader(clock, 1, 0.5, 4)
    monkeypatch.setattr(data.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(data, "loader", lambda name: fake)
    monkeypatch.setattr(data.formats, "detect", lambda path: formats.data_format("imagefolder"))
    monkeypatch.setattr(data, "wait_for_gpu", lambda: synced.append(clock[0]))
    cfg = data.DataBenchConfig(path=str(tmp_path), loaders=("torch",), batch_size=4)
    assert data.measure_once(cfg, None, "dali", 1, 0, device) == pytest.approx(8.0)
    if device == "cuda":
        assert fake.asked == {"epoch": 0, "device": "cuda", "device_id": 0, "framework": "torch"}
        assert len(synced) == 2
    else:
        assert fake.asked == {"epoch": 0} and synced == []


@pytest.mark.parametrize("cold", [False, True])
def test_data_bench_cold_empties_the_page_cache_of_every_file_of_the_dataset_before_each_measurement(
        monkeypatch, tmp_path, cold):
    """--cold: each file under the dataset's folder (nested too) is advised out of the page cache before the
    loader starts (and before the clock), so the loaders read from the disk; warm, nothing is touched."""
    from bench.commands import data

    for name in ("train/a/1.jpg", "train/b/2.jpg", "val/a/3.jpg", "labels.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"x" * 10)
    clock, advised = [0.0], []
    fake = _RecordingLoader(clock, 1, 0.5, 4)
    real_batches = fake.batches

    def batches(*args, **kwargs):
        assert len(advised) == (4 if cold else 0)  # all of it before the loader's first batch
        return real_batches(*args, **kwargs)

    fake.batches = batches
    monkeypatch.setattr(data.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(data, "loader", lambda name: fake)
    monkeypatch.setattr(data.formats, "detect", lambda path: formats.data_format("imagefolder"))
    monkeypatch.setattr(data.os, "posix_fadvise", lambda fd, offset, length, advice: advised.append(
        (os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice)))
    cfg = data.DataBenchConfig(path=str(tmp_path), loaders=("torch",), batch_size=4, cold=cold)
    assert data.measure_once(cfg, None, "torch", 1, 0) == pytest.approx(8.0)
    if cold:
        assert sorted(advised) == sorted((str(tmp_path / name), 0, 0, os.POSIX_FADV_DONTNEED)
                                         for name in ("train/a/1.jpg", "train/b/2.jpg", "val/a/3.jpg", "labels.txt"))
    else:
        assert advised == []


def test_data_bench_decodes_on_the_gpu_only_for_a_loader_that_can_and_only_where_there_is_one(monkeypatch, tmp_path):
    """--device auto: DALI on the GPU where PyTorch sees one, else on the CPU; --device cuda without a GPU: one
    line; the torch and tf loaders on the CPU whatever --device says; an unknown device refused."""
    from bench.commands import data

    monkeypatch.setattr(data.formats, "detect", lambda path: formats.data_format("imagefolder"))

    def cfg(device):
        return data.DataBenchConfig(path=str(tmp_path), loaders=("torch",), device=device)

    assert data.LOADERS["dali"].decodes_on_gpu and not data.LOADERS["torch"].decodes_on_gpu
    monkeypatch.setattr(data, "gpu_visible", lambda: False)
    assert [data.loader_device(cfg(d), "dali") for d in ("auto", "cpu")] == ["cpu", "cpu"]
    with pytest.raises(BenchError, match="--device cuda: no GPU visible to PyTorch here for the dali loader"):
        data.loader_device(cfg("cuda"), "dali")
    monkeypatch.setattr(data, "gpu_visible", lambda: True)
    assert [data.loader_device(cfg(d), "dali") for d in ("auto", "cpu", "cuda")] == ["cuda", "cpu", "cuda"]
    assert {data.loader_device(cfg(d), n) for d in ("auto", "cuda") for n in ("torch", "tf")} == {"cpu"}
    with pytest.raises(BenchError, match="--device must be one of auto, cpu, cuda \\(got 'gpu'\\)"):
        cfg("gpu")


def test_a_loader_that_decoded_on_the_gpu_has_no_decode_rate_per_core(monkeypatch, tmp_path):
    """The record says where each loader decoded; the cores to feed the GPUs come from the CPU decoders only (a
    GPU's nvJPEG rate is not a core's)."""
    from bench.commands import data

    make(MakeConfig(path=str(tmp_path / "d"), images=30, classes=3, image_size=8))
    found = {"torch": ({1: [50.0, 60.0, 70.0]}, "cpu"), "dali": ({1: [900.0, 1000.0, 1100.0]}, "cuda")}
    monkeypatch.setattr(data, "child_rates", lambda cfg, name: found[name])
    record = data.run(data.DataBenchConfig(path=str(tmp_path / "d"), loaders=("torch", "dali"), workers=(1,),
                                           gpu_rate=120.0, gpus=4))
    assert [(r.loader, r.device, r.images_per_sec) for r in record.rows] == [("torch", "cpu", 60.0),
                                                                             ("dali", "cuda", 1000.0)]
    assert record.decode_rate_per_core == {"torch": 60.0} and record.cores_to_feed == {"torch": {"given": 8}}
    # --device cuda where there is no GPU: refused before any loader is measured (the torch loader first here)
    monkeypatch.setattr(data, "gpu_visible", lambda: False)
    monkeypatch.setattr(data, "child_rates", lambda cfg, name: pytest.fail(f"{name} measured"))
    with pytest.raises(BenchError, match="--device cuda: no GPU visible"):
        data.run(data.DataBenchConfig(path=str(tmp_path / "d"), loaders=("torch", "dali"), device="cuda"))


def test_make_leaves_every_class_of_val_in_train_too():
    """bench data make at small sizes: the last sample of a class stays in train/, so every val/ class is one the
    classifier trains on and the folder reads back (before, val/ could hold a class train/ lacked)."""
    from bench.data.formats.imagefolder import held_out

    labels = np.array([3, 3, 1, 7, 1, 3, 9, 9])  # class 7 once: it never goes to val
    val = held_out(labels, 4)
    assert val == [0, 1, 2, 6] and set(labels[val]) <= set(np.delete(labels, val))
    assert held_out(np.array([0, 1, 2]), 1) == []  # one sample a class: nothing can be held out


def test_a_small_made_folder_reads_back_with_every_val_class_in_train(tmp_path):
    # seed 3: the first six samples held out would leave one of their classes out of train/
    record = make(MakeConfig(path=str(tmp_path / "d"), images=30, classes=12, image_size=8, seed=3))
    data = load(tmp_path / "d")
    assert record["counts"]["val"] == 6 and set(data.val.labels) <= set(data.train.labels)
