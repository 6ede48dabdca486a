"""Datasets on disk (bench.data): bench data make in every format, the datasets read back and sharded, both
loaders' batches, bad input in one line, and bench data bench end to end."""

import json
import pickle

import numpy as np
import pytest
from conftest import bench

from bench.data import detect_format
from bench.data.datasets import load, shard
from bench.data.make import MakeConfig, make
from bench.errors import BenchError


def small(path, **kw):
    return make(MakeConfig(path=str(path), **{"images": 24, "image_size": 48, **kw}))


@pytest.mark.parametrize("args, message", [
    ({"format": "jpeg"}, "--format takes imagefolder, tfrecord, cifar, tokens"),
    ({"source": "web"}, "--from takes synthetic or digits"),
    ({"source": "digits", "format": "tokens"}, "--from digits makes images"),
    ({"images": 0}, "--images must be >= 1"),
    ({"val_fraction": 1.0}, "--val-fraction must be between 0 and 1"),
    ({"format": "cifar", "image_size": 64}, "the CIFAR-10 format holds 32 x 32 images"),
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
    assert detect_format(tmp_path / "d") == "imagefolder"
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
    assert data.format == "cifar" and len(data.splits["train"]) == 32 and len(data.splits["val"]) == 8
    assert data.splits["train"].arrays.shape[1:] == (32, 32, 3)
    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", images=10, seq_len=16, classes=1000))
    ids = np.fromfile(tmp_path / "t" / "train.bin", dtype=np.uint16)
    assert len(ids) == 8 * 16 and ids.max() < 1000 and detect_format(tmp_path / "t") == "tokens"


def test_shards_are_disjoint_whole_batches_and_follow_the_seed():
    parts = [shard(103, r, 4, 5, seed=1) for r in range(4)]
    assert {len(p) for p in parts} == {25} and len(set(np.concatenate(parts))) == 100
    assert (shard(103, 0, 4, 5, seed=1) == parts[0]).all() and not (shard(103, 0, 4, 5, seed=2) == parts[0]).all()
    assert not (shard(103, 0, 4, 5, seed=1, epoch=1) == parts[0]).all()  # another epoch, another order
    with pytest.raises(BenchError, match="the split has 7 samples: fewer than 4 rank\\(s\\) x batch 2"):
        shard(7, 0, 4, 2, seed=0)


def test_bad_datasets_are_one_line(tmp_path):
    with pytest.raises(BenchError, match="no such file or folder"):
        detect_format(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchError, match="the folder is empty"):
        detect_format(tmp_path / "empty")
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "x.txt").write_text("x")
    with pytest.raises(BenchError, match="cannot tell its format"):
        detect_format(tmp_path / "odd")
    small(tmp_path / "d")
    (tmp_path / "d" / "meta.json").write_text(json.dumps({"format": "cifar", "classes": 10}))
    with pytest.raises(BenchError, match="the training split has no samples"):
        load(tmp_path / "d")


@pytest.mark.framework
def test_the_digits_are_real_labelled_images(tmp_path):
    record = make(MakeConfig(path=str(tmp_path / "d"), source="digits", format="imagefolder", image_size=16))
    assert record["classes"] == 10 and sum(record["counts"].values()) == 1797
    data = load(tmp_path / "d")
    assert sorted(set(data.splits["train"].labels.tolist())) == list(range(10))


@pytest.mark.framework
def test_every_loader_gives_normalised_batches_of_the_run_size(tmp_path):
    from bench.data.loaders import LOADERS

    small(tmp_path / "d", image_size=None, images=20)  # 500 x 375 JPEGs
    small(tmp_path / "c", format="cifar", images=40, image_size=None)
    small(tmp_path / "r", format="tfrecord", images=20, image_size=None, shards=2)
    for name, path, size, framework in (("torch", "d", 64, None), ("tf", "d", 64, None), ("torch", "c", 32, None),
                                        ("tf", "c", 32, None), ("tf", "r", 64, None), ("dali", "d", 64, "torch"),
                                        ("dali", "d", 48, "tensorflow")):
        data = load(tmp_path / path)
        images, labels = next(iter(LOADERS[name].batches(data, "train", size, 4, 0, seed=0, framework=framework)))
        x = np.asarray(images)
        nchw = name == "torch" or framework == "torch"
        shape = (4, 3, size, size) if nchw else (4, size, size, 3)
        assert x.shape == shape and x.dtype == np.float32, (name, path, x.shape)
        assert -3 < x.mean() < 3 and np.asarray(labels).max() < data.classes, (name, path)


@pytest.mark.framework
def test_a_file_that_cannot_be_decoded_is_named(tmp_path):
    from bench.data.loaders import LOADERS

    small(tmp_path / "d")
    bad = sorted((tmp_path / "d" / "train").rglob("*.JPEG"))
    for f in bad:
        f.write_bytes(b"not an image")
    with pytest.raises(BenchError, match=f"cannot decode .*{bad[0].parent.parent.name}"):
        next(iter(LOADERS["torch"].batches(load(tmp_path / "d"), "train", 32, 2, 0, seed=0)))


@pytest.mark.multiproc
def test_data_make_and_data_bench_from_the_command_line(tmp_path):
    """The user's path: bench data make, then bench data bench with every loader (each in its own process), a
    record through the store, and the cores-to-feed line."""
    r = bench("data", "make", str(tmp_path / "d"), "--images", "40", "--image-size", "96")
    assert r.returncode == 0 and "imagefolder from synthetic, 32 train, 8 val images" in r.stdout, r.stderr
    r = bench("data", "bench", str(tmp_path / "d"), "--image-size", "64", "--batch-size", "4", "--batches", "2",
              "--warmup", "1", "--repeats", "1", "--workers", "0,1", "--output", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (tmp_path / "out").glob("*.json")
    record = json.loads(path.read_text())
    from bench.data.loaders import installed

    assert installed() == ("torch", "tf", "dali")  # the venv carries DALI: every loader by default
    assert record["kind"] == "data-bench" and {(row["loader"], row["workers"]) for row in record["rows"]} == {
        (name, w) for name in installed() for w in (0, 1)}
    assert all(row["images_per_sec"] > 0 for row in record["rows"])
    assert set(record["cores_to_feed"]["torch"]) == {"H100 TF32", "H100 AMP"} and "to feed 8 GPUs" in r.stdout
    r = bench("data", "bench", str(tmp_path / "missing"))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].endswith("no such file or folder"), r.stderr
    assert "Traceback" not in r.stderr
