"""Datasets on disk (bench.data): bench data make in every format, the datasets read back and sharded, both
loaders' batches, bad input in one line, and bench data bench end to end."""


import numpy as np
import pytest

from bench.data.datasets import load
from bench.data.make import MakeConfig, make
from bench.errors import BenchError
from tests.unit.test_data import small


def test_the_digits_are_real_labelled_images(tmp_path):
    record = make(MakeConfig(path=str(tmp_path / "d"), source="digits", format="imagefolder", image_size=16))
    assert record["classes"] == 10 and sum(record["counts"].values()) == 1797
    data = load(tmp_path / "d")
    assert sorted(set(data.train.labels.tolist())) == list(range(10))


def test_every_loader_gives_normalised_batches_of_the_run_size(tmp_path):
    """Normalised as the models were trained (ImageNet's per-channel mean and deviation of 0-255 pixels): mapped
    back, every value is a pixel (0 to 255), and the batch holds values on both sides of the mean (a loader that
    only scaled to 0-1, or skipped the normalisation, fails one or the other). The torch and tf loaders' batches are
    uint8 pixels, normalised on the run's device by the trainer (TorchTrainer.to_device, tf_common.model_input),
    which is what the models receive: both are checked; DALI's come normalised."""
    from types import SimpleNamespace

    import torch

    from bench.data.loaders import LOADERS, MEAN, STD
    from bench.modes.tf_common import model_input
    from bench.modes.torch_common import TorchTrainer

    small(tmp_path / "d", image_size=None, images=20)  # 500 x 375 JPEGs
    small(tmp_path / "c", format="cifar", images=40, image_size=None)
    small(tmp_path / "r", format="tfrecord", images=20, image_size=None, shards=2)
    trainer = SimpleNamespace(device=torch.device("cpu"), cfg=SimpleNamespace(channels_last=False), _pixel_scale=None)
    for name, path, size, framework in (("torch", "d", 64, None), ("tf", "d", 64, None), ("torch", "c", 32, None),
                                        ("tf", "c", 32, None), ("tf", "c", 48, None), ("tf", "r", 64, None),
                                        ("dali", "d", 64, "torch"), ("dali", "d", 48, "tensorflow")):
        data = load(tmp_path / path)
        images, labels = next(iter(LOADERS[name].batches(data, "train", size, 4, 0, seed=0, framework=framework)))
        nchw = name == "torch" or framework == "torch"
        shape = (4, 3, size, size) if nchw else (4, size, size, 3)
        channel = (1, 3, 1, 1) if nchw else (1, 1, 1, 3)
        if name in ("torch", "tf"):
            raw = np.asarray(images)
            assert raw.shape == shape and raw.dtype == np.uint8, (name, path, raw.shape, raw.dtype)
            if name == "torch":
                images, labels = TorchTrainer.to_device(trainer, (images, labels))
            else:
                images = model_input(images)
            expected = (raw.astype(np.float32) / 255 - MEAN.reshape(channel)) / STD.reshape(channel)
            np.testing.assert_allclose(np.asarray(images), expected, rtol=1e-5, atol=1e-5)
        x = np.asarray(images)
        assert x.shape == shape and x.dtype == np.float32, (name, path, x.shape)
        pixels = x * (STD * 255).reshape(channel) + (MEAN * 255).reshape(channel)
        assert -1 <= pixels.min() and pixels.max() <= 256 and x.min() < -0.5 and x.max() > 0.5, \
            (name, path, float(pixels.min()), float(pixels.max()), float(x.min()), float(x.max()))
        assert np.asarray(labels).max() < data.classes, (name, path)


def test_the_tf_loaders_uint8_batches_feed_the_model_what_per_image_normalisation_did(tmp_path, monkeypatch):
    """Issue 92 item 11: the tf loader normalised each image inside tf.data (a third of its one-core rate); now it
    hands the bilinear crop rounded to uint8 and the step normalises the batch. The same files, crops and flips
    (stateless, keyed by seed, epoch and sample) through the old path (the float crop, normalised per image: the
    rounding taken out of the pipeline) and the new (uint8, then tf_common.model_input): every value within the
    rounding's half pixel over the deviation, and on average far inside it. The CIFAR size, with no resize, is
    the same to the bit."""
    from bench.data.loaders import LOADERS, MEAN, STD
    from bench.modes.tf_common import model_input, tf

    small(tmp_path / "d", image_size=None, images=20)
    small(tmp_path / "c", format="cifar", images=40, image_size=None)
    new = {path: [model_input(x).numpy() for x, _ in LOADERS["tf"].batches(load(tmp_path / path), "train", size,
                                                                           4, 0, seed=3)]
           for path, size in (("d", 64), ("c", 32))}
    monkeypatch.setattr(tf, "round", lambda x: x)
    monkeypatch.setattr(tf, "saturate_cast", lambda x, dtype: x)
    for path, size in (("d", 64), ("c", 32)):
        old = [np.asarray(x) for x, _ in LOADERS["tf"].batches(load(tmp_path / path), "train", size, 4, 0, seed=3)]
        assert len(old) == len(new[path]) and old[0].dtype == (np.float32 if path == "d" else np.uint8)
        old = np.concatenate([(x - MEAN * 255) / (STD * 255) for x in old])
        got = np.concatenate(new[path])
        diff = np.abs(got - old)
        if path == "c":
            np.testing.assert_array_equal(got, old)
        else:
            assert 0 < diff.max() <= 0.5 / (255 * STD.min()) + 1e-5 and diff.mean() < 0.005, \
                (float(diff.max()), float(diff.mean()))


def test_dali_reads_each_epochs_global_shuffle_in_the_order_the_torch_loader_reads(tmp_path):
    """Issue 66 item 6: DALI's own sharding gave each rank a contiguous slice of the class-sorted list, shuffled
    only inside a buffer (near one-class batches). Now each epoch's pipeline reads the rank's shard of that epoch
    (bench.data.datasets.shard): the labels DALI yields are the shard's, in its order, the torch loader's the same,
    and the next epoch is another shuffle."""
    from bench.data.datasets import shard
    from bench.data.loaders import LOADERS

    small(tmp_path / "d", images=60, classes=10, image_size=32)  # 48 training images: 6 batches of 4 per rank
    data = load(tmp_path / "d")
    labels = data.train.labels
    for rank in (0, 1):
        expected = [labels[shard(len(labels), rank, 2, 4, 5, e)].tolist() for e in (0, 1)]
        assert expected[0] != expected[1]
        for name, workers in (("dali", 1), ("torch", 0)):
            batches = LOADERS[name].batches(data, "train", 32, 4, workers, seed=5, rank=rank, world=2, epoch=0,
                                            epochs=2, framework="torch")
            got = [int(x) for _, batch in batches for x in np.asarray(batch)]
            assert got == expected[0] + expected[1], (name, rank)


def test_dali_builds_the_next_epochs_pipeline_beside_training_and_runs_each_epochs_batches_only(tmp_path,
                                                                                                 monkeypatch):
    """An epoch boundary inside a timed window (a goal run's windows are epochs) cost DALI a pipeline build and a
    cold start on the training thread, and each epoch's pipeline decoded a batch past its end. Now every pipeline
    after the first is built in the helper thread while the epoch before it trains, and each runs exactly its
    epoch's batches (DALI's iteration set-up counted per pipeline)."""
    import threading

    from nvidia.dali.pipeline import Pipeline

    from bench.data.loaders import LOADERS

    built, iterations = [], {}
    build, setup = Pipeline.build, Pipeline._iter_setup

    def recorded_build(self):
        if id(self) not in iterations:
            iterations[id(self)] = 0
            built.append(threading.current_thread().name)
        return build(self)

    def counted_setup(self):
        iterations[id(self)] += 1
        return setup(self)

    monkeypatch.setattr(Pipeline, "build", recorded_build)
    monkeypatch.setattr(Pipeline, "_iter_setup", counted_setup)
    small(tmp_path / "d", images=60, classes=10, image_size=32)  # 48 training images: 6 batches of 4 per rank
    data = load(tmp_path / "d")
    batches = LOADERS["dali"].batches(data, "train", 32, 4, 1, seed=5, rank=0, world=2, epoch=0, epochs=3,
                                      framework="torch")
    assert sum(1 for _ in batches) == 18
    consumer = threading.current_thread().name
    assert len(built) == 3
    assert all(name != consumer and name.startswith("dali-next-epoch") for name in built[1:]), built
    assert list(iterations.values()) == [6, 6, 6]


def test_a_png_named_jpeg_is_read_by_every_loader(tmp_path):
    """Issue 66 item 10: ImageNet's training set holds a PNG named .JPEG, and the tf loader's decode_and_crop_jpeg
    died on it. Every loader reads a split where one training and one held-out file are PNGs under JPEG names:
    the whole epoch, each image a crop of the run's size."""
    import io

    from PIL import Image

    from bench.data.loaders import LOADERS

    small(tmp_path / "d", images=20, image_size=None)  # 500 x 375: 16 training, 4 held-out
    for split in ("train", "val"):
        path = sorted((tmp_path / "d" / split).rglob("*.JPEG"))[0]
        with Image.open(path) as im:
            buffer = io.BytesIO()
            im.save(buffer, format="PNG")
        path.write_bytes(buffer.getvalue())
    data = load(tmp_path / "d")
    for name in ("tf", "torch", "dali"):
        for split, batch, count in (("train", 4, 4), ("val", 2, 2)):
            batches = list(LOADERS[name].batches(data, split, 32, batch, 1, seed=0, framework="torch"))
            assert len(batches) == count and all(tuple(np.asarray(x).shape)[1:] in ((3, 32, 32), (32, 32, 3))
                                                 for x, _ in batches), (name, split)


def test_a_file_that_cannot_be_decoded_is_named(tmp_path):
    from bench.data.loaders import LOADERS

    small(tmp_path / "d")
    bad = sorted((tmp_path / "d" / "train").rglob("*.JPEG"))
    for f in bad:
        f.write_bytes(b"not an image")
    with pytest.raises(BenchError, match=f"cannot decode .*{bad[0].parent.parent.name}"):
        next(iter(LOADERS["torch"].batches(load(tmp_path / "d"), "train", 32, 2, 0, seed=0)))


def test_the_torch_loader_tells_how_many_batches_its_workers_made_ahead(tmp_path):
    """The queue bench.data.feed settles before the clock starts: empty while the workers start (each a new
    interpreter that imports torch), full once they had time."""
    import time

    from bench.data.loaders import LOADERS

    small(tmp_path / "d", images=40)
    batches = LOADERS["torch"].batches(load(tmp_path / "d"), "train", 32, 2, 2, seed=0, epochs=None)
    try:
        assert batches.depth == 4  # 2 workers, 2 batches ahead each
        assert batches.ready() == 0
        deadline = time.monotonic() + 60
        while batches.ready() < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batches.ready() == 4
        images, _ = next(batches)
        assert images.shape == (2, 3, 32, 32)
    finally:
        batches.close()
    plain = LOADERS["torch"].batches(load(tmp_path / "d"), "train", 32, 2, 0, seed=0)
    assert plain.depth == 0 and plain.ready() == 0  # no workers: nothing made ahead
    plain.close()


def test_tfrecord_ranks_read_whole_files_in_a_new_order_every_epoch_and_the_same_count(tmp_path):
    """Issue 66 item 7. Four shard files, each record labelled by its file: at 3 ranks every rank yields the same
    batches per epoch (two files' worth of records at rank 0, one at the others, cut to the shared count), no two
    ranks read one file in an epoch, the files move between ranks from one epoch to the next, and 5 ranks for 4
    files is one line."""
    from bench.data.datasets import rank_samples
    from bench.data.loaders import LOADERS
    from bench.tfutil import import_tf

    tf, _ = import_tf()
    small(tmp_path / "r", format="tfrecord", images=60, image_size=32, shards=4, val_fraction=0.2)
    for path in sorted((tmp_path / "r").glob("train-*-of-*")):  # relabel every record with its file's number
        records = list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())
        file_number = int(path.name.split("-")[1])
        with tf.io.TFRecordWriter(str(path)) as writer:
            for raw in records:
                example = tf.train.Example.FromString(raw)
                example.features.feature["image/class/label"].int64_list.value[:] = [file_number + 1]
                writer.write(example.SerializeToString())
    data = load(tmp_path / "r")
    train = data.train
    assert len(train) == 48 and len(train.shards) == 4  # 12 records a file
    assert rank_samples(train, 3, 4) == 12  # floor(4 / 3) files x 12 records, whole batches of 4
    epochs = 3
    seen = {}  # (rank, epoch) -> the files whose records it read
    for rank in range(3):
        batches = list(LOADERS["tf"].batches(data, "train", 32, 4, 1, seed=7, rank=rank, world=3, epochs=epochs))
        assert len(batches) == epochs * 3, rank  # 12 records = 3 batches of 4, every epoch, on every rank
        for epoch in range(epochs):
            labels = np.concatenate([np.asarray(y) for _, y in batches[3 * epoch:3 * epoch + 3]])
            seen[rank, epoch] = set(labels.tolist())
    for epoch in range(epochs):
        files = [seen[rank, epoch] for rank in range(3)]
        assert all(files) and not any(a & b for i, a in enumerate(files) for b in files[i + 1:]), files
    assert len({tuple(sorted(seen[0, epoch])) for epoch in range(epochs)}) > 1  # the order changes with the epoch
    with pytest.raises(BenchError, match=r"4 TFRecord training shard file\(s\) for 5 ranks"):
        rank_samples(train, 5, 4)


def test_tfrecord_records_come_in_one_order_however_fast_each_file_reads(tmp_path, monkeypatch):
    """A resumed run's epochs read the records an uninterrupted one reads (docs/training.md): the files are read in
    parallel, their records interleaved in a fixed order. A pipeline started at epoch 1 reads the batches of an
    uninterrupted one's epoch 1; with each record of one file made 50 ms late, the batches are still those of the
    files read at full speed (taken in whichever order they became ready, the other files' records would come
    first)."""
    import time

    from bench.data.loaders import LOADERS
    from bench.tfutil import import_tf

    tf, _ = import_tf()
    small(tmp_path / "r", format="tfrecord", images=40, image_size=32, shards=4, val_fraction=0.2)
    data = load(tmp_path / "r")

    def pixels(epoch=0, epochs=1):  # the epochs' batches, four files read at once (4 workers)
        batches = LOADERS["tf"].batches(data, "train", 32, 4, 4, seed=7, epoch=epoch, epochs=epochs)
        return np.concatenate([np.asarray(x) for x, _ in batches])

    at_full_speed = pixels()
    assert np.array_equal(pixels(epoch=1), pixels(epochs=2)[32:])  # a pipeline resumed at epoch 1 reads epoch 1
    slow = str(sorted((tmp_path / "r").glob("train-*-of-*"))[0])
    reader = tf.data.TFRecordDataset

    def late(name):
        if name.numpy().decode() == slow:
            time.sleep(0.05)
        return 0

    def slow_reader(name):  # the loader's reader, each record of one file held back
        def hold(record):
            with tf.control_dependencies([tf.py_function(late, [name], tf.int32)]):
                return tf.identity(record)
        return reader(name).map(hold)

    monkeypatch.setattr(tf.data, "TFRecordDataset", slow_reader)
    assert len(at_full_speed) == 32 and np.array_equal(pixels(), at_full_speed)


def test_the_tfrecord_record_order_does_not_depend_on_the_worker_count(tmp_path):
    """The order (and so a resumed epoch's batches, whose crops are keyed by the records' places) is the same with
    1, 2 or 4 workers: their default follows each node's cores, and a resumed run may get another."""
    from bench.data.loaders import LOADERS

    small(tmp_path / "r", format="tfrecord", images=40, image_size=32, shards=4, val_fraction=0.2)
    data = load(tmp_path / "r")

    def pixels(workers):
        batches = LOADERS["tf"].batches(data, "train", 32, 4, workers, seed=7, epoch=1, epochs=1)
        return np.concatenate([np.asarray(x) for x, _ in batches])

    one = pixels(1)
    assert np.array_equal(pixels(2), one) and np.array_equal(pixels(4), one)


def test_a_tfrecord_split_of_fewer_files_than_workers_is_read(tmp_path):
    """The held-out split is one file: read with 2 workers (tf.data refuses more parallel reads than files)."""
    from bench.data.loaders import LOADERS

    small(tmp_path / "r", format="tfrecord", images=40, image_size=32, shards=4, val_fraction=0.2)
    data = load(tmp_path / "r")
    assert len(data.splits["val"].shards) == 1
    batches = list(LOADERS["tf"].batches(data, "val", 32, 4, 2, seed=7))
    assert sum(len(y) for _, y in batches) == 8


def test_the_tf_loader_reads_each_token_window_from_its_file_and_checks_its_ids(tmp_path):
    """Issue 66 item 8. tf.data reads sample i of a token file where it lies (no constant of the corpus): the same
    windows as Split.sample in the torch loader's order, at both ranks of two and in the ps graph, and an id
    outside the vocabulary is one line naming the file, found when its window is read."""
    from bench.data.datasets import shard
    from bench.data.feed import readable
    from bench.data.loaders import LOADERS

    make(MakeConfig(path=str(tmp_path / "t"), format="tokens", source="text", seq_len=16))
    data = load(tmp_path / "t", seq_len=8)
    train = data.train
    for rank in range(2):
        batches = list(LOADERS["tf"].batches(data, "train", 0, 4, 1, seed=3, rank=rank, world=2, epoch=1))
        order = shard(len(train), rank, 2, 4, 3, 1)
        assert sum(len(y) for _, y in batches) == len(order) > 0
        pairs = np.concatenate([np.asarray(x) for x, _ in batches])
        targets = np.concatenate([np.asarray(y) for _, y in batches])
        for got, want, i in zip(pairs, targets, order, strict=True):
            pair, target = train.sample(int(i))
            assert (got == pair).all() and (want == target).all(), i
    graph = LOADERS["tf"].dataset(data, "train", 0, 4, 1, 3, 0, 2, 0, 1, graph_only=True)
    x, y = next(iter(graph))
    assert x.shape == (4, 2, 8) and y.shape == (4, 8)
    assert len(graph._as_serialized_graph().numpy()) < train.tokens.nbytes  # the file is not in the pipeline
    ids = np.fromfile(tmp_path / "t" / "val.bin", np.uint16)
    ids[20] = data.classes
    ids.tofile(tmp_path / "t" / "val.bin")
    bad = load(tmp_path / "t", seq_len=8)
    with pytest.raises(Exception) as failed:  # where Python runs in the pipeline: Split.sample's check
        list(LOADERS["tf"].batches(bad, "val", 0, 4, 1, seed=3))
    top = data.classes - 1
    assert readable(str(failed.value)) == \
        f"{tmp_path / 't' / 'val.bin'} holds token id {top + 1} (sample 1), outside the vocabulary 0..{top}"
    with pytest.raises(Exception) as failed:  # in the graph of the ps workers: an assertion
        list(LOADERS["tf"].dataset(bad, "val", 0, 4, 1, 3, 0, 1, 0, 1, graph_only=True))
    assert readable(str(failed.value)) == \
        f"{tmp_path / 't' / 'val.bin'} holds a token id outside the vocabulary 0..{data.classes - 1}"


def test_the_torch_pipeline_leaves_the_ranks_random_stream_alone(tmp_path):
    """Starting a DataLoader's iterator draws its workers' base seed: from the pipeline's own generator, never from
    PyTorch's global one, whose stream is the rank's dropout masks (a resumed run starts its pipeline after its
    checkpoint gave that stream back)."""
    import torch

    from bench.data.loaders import LOADERS

    small(tmp_path / "d")
    data = load(tmp_path / "d")
    torch.manual_seed(3)
    before = torch.get_rng_state()
    for workers in (0, 1):
        for split in ("train", "val"):
            next(iter(LOADERS["torch"].batches(data, split, 32, 2, workers, seed=0)))
    assert torch.equal(torch.get_rng_state(), before)


def test_a_tfrecord_label_outside_the_classes_is_refused_in_one_line(tmp_path):
    """A dataset whose labels start at 0 read with the offset of ImageNet's scripts (1) would train class 0 as -1
    (NaN loss on a GPU, no error): the record is refused when it is read, in one line naming the dataset."""
    import json

    from bench.data.feed import readable
    from bench.data.loaders import LOADERS

    small(tmp_path / "r", format="tfrecord", images=20, classes=2, image_size=32, shards=2)
    data = load(tmp_path / "r")
    assert list(LOADERS["tf"].batches(data, "train", 32, 4, 0, seed=0))  # as written: every label inside
    meta = tmp_path / "r" / "meta.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "label_offset": data.label_offset + 1}))
    shifted = load(tmp_path / "r")
    with pytest.raises(Exception) as failed:
        list(LOADERS["tf"].batches(shifted, "train", 32, 4, 0, seed=0))
    assert readable(str(failed.value)) == (
        f"{tmp_path / 'r'} holds a TFRecord label outside {data.label_offset + 1}..{data.label_offset + 2} (its 2 "
        f"classes from label_offset {data.label_offset + 1}; meta.json gives the label of the first class)")
