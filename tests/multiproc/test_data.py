"""Datasets on disk (bench.data): bench data make in every format, the datasets read back and sharded, both
loaders' batches, bad input in one line, and bench data bench end to end."""

import ctypes
import json
import os
import time

from tests.conftest import bench


def test_data_make_and_data_bench_from_the_command_line(tmp_path):
    """The user's path: bench data make, then bench data bench with every loader (each in its own process), a
    record through the store, and the cores-to-feed line."""
    r = bench("data", "make", str(tmp_path / "d"), "--images", "40", "--image-size", "96")
    assert r.returncode == 0 and "imagefolder from synthetic, 32 train, 8 val images" in r.stdout, r.stderr
    start = time.monotonic()
    r = bench("data", "bench", str(tmp_path / "d"), "--image-size", "64", "--batch-size", "4", "--batches", "2",
              "--warmup", "1", "--repeats", "1", "--workers", "0,1", "--output", str(tmp_path / "out"))
    wall = time.monotonic() - start
    assert r.returncode == 0, r.stderr[-3000:]
    (path,) = (tmp_path / "out").glob("*.json")
    record = json.loads(path.read_text())
    from bench.data.loaders import installed

    assert installed() == ("torch", "tf", "dali")  # the venv carries DALI: every loader by default
    assert record["kind"] == "data-bench" and {(row["loader"], row["workers"]) for row in record["rows"]} == {
        (name, w) for name in installed() for w in (0, 1)}
    for row in record["rows"]:  # each rate is its round's, and its timed samples took seconds within the command's
        untimed, timed = record["batches"][str(row["workers"])]
        assert timed >= 2 and len(row["raw"]) == 1 and row["images_per_sec"] == row["raw"][0], row
        assert 0 < timed * 4 / row["images_per_sec"] < wall, (row, timed, wall)
    assert record["decode_rate_per_core"] == {row["loader"]: row["images_per_sec"] for row in record["rows"]
                                              if row["workers"] == 1}
    assert set(record["cores_to_feed"]["torch"]) == {"H100 TF32", "H100 AMP"} and "to feed 8 GPUs" in r.stdout
    # no GPU here: DALI, which could decode on one (--device auto), decoded on the CPU, as every loader did
    assert {row["device"] for row in record["rows"]} == {"cpu"} and "decodes on" in r.stdout
    r = bench("data", "bench", str(tmp_path / "d"), "--device", "cuda", "--output", str(tmp_path / "cuda"))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        "error: --device cuda: no GPU visible to PyTorch here for the dali loader (--device cpu, or auto: the GPU "
        "where there is one)"), r.stderr
    assert "data: round" not in r.stderr and not list(tmp_path.glob("cuda/*.json"))  # refused before any loader ran
    # a domain error in the loader's child: the one line the parent would print, no traceback, no class name
    more = ("data", "bench", str(tmp_path / "d"), "--loaders", "torch", "--batch-size", "4", "--batches", "20",
            "--warmup", "1", "--repeats", "1", "--workers", "0", "--output", str(tmp_path / "more"))
    r = bench(*more)
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1] == (
        "error: torch: the training split gave fewer than 21 batches of 4 to rank 0 of 1 (1 untimed, 20 timed at 0 "
        "worker(s)): make a larger dataset, or lower --batches, --warmup or --batch-size"), r.stderr
    assert "Traceback" not in r.stderr and "BenchError" not in r.stderr and not list(tmp_path.glob("more/*.json"))
    r = bench(*more, HVDBENCH_DEBUG="1")
    assert r.returncode == 1 and "Traceback" in r.stderr and "bench.errors.BenchError: torch: the training" in r.stderr
    r = bench("data", "bench", str(tmp_path / "missing"))
    assert r.returncode == 1 and r.stderr.strip().splitlines()[-1].endswith("no such file or folder"), r.stderr
    assert "Traceback" not in r.stderr


def cached_pages(path) -> int:
    """How many of a file's pages are in the page cache (mincore over a read-only mapping of it)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    size, page = os.path.getsize(path), os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    try:
        mapped = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        assert mapped not in (None, ctypes.c_void_p(-1).value), ctypes.get_errno()
        pages = (ctypes.c_ubyte * ((size + page - 1) // page))()
        assert libc.mincore(mapped, size, pages) == 0, ctypes.get_errno()
        libc.munmap(mapped, size)
        return sum(p & 1 for p in pages)
    finally:
        os.close(fd)


def test_data_bench_cold_reads_the_dataset_out_of_the_page_cache(tmp_path):
    """--cold as a user runs it: the dataset's files leave the page cache before each measurement (a file the
    loaders never read, cached beforehand, is out of it afterwards; warm, it stays), and the record and the table
    say which."""
    r = bench("data", "make", str(tmp_path / "d"), "--images", "40", "--image-size", "64")
    assert r.returncode == 0, r.stderr
    unread = tmp_path / "d" / "notes.txt"
    args = ("--loaders", "torch", "--image-size", "32", "--batch-size", "4", "--batches", "2", "--warmup", "1",
            "--repeats", "1", "--workers", "1")
    for cold in (False, True):
        unread.write_bytes(os.urandom(1 << 16))
        unread.read_bytes()
        assert cached_pages(unread) > 0
        out = tmp_path / f"out-{cold}"
        r = bench("data", "bench", str(tmp_path / "d"), *args, "--cold" if cold else "--warm", "--output", str(out),
                  COLUMNS="300")
        assert r.returncode == 0, r.stderr[-3000:]
        record = json.loads(next(out.glob("*.json")).read_text())
        assert record["config"]["cold"] is cold and record["rows"][0]["images_per_sec"] > 0
        assert ("page cache: emptied of the dataset's files before each measurement" in r.stdout) is cold
        assert (cached_pages(unread) == 0) is cold


def test_data_bench_of_a_tokens_file_gives_sequences_and_tokens_per_second(tmp_path):
    """A tokens file: each loader that reads token ids (the default's DALI is left out: it reads images), its rate
    in sequences/s and tokens/s (x --seq-len); no cores-to-feed line (those GPU rates are images')."""
    r = bench("data", "make", str(tmp_path / "t"), "--format", "tokens", "--images", "200", "--seq-len", "16",
              "--classes", "300")
    assert r.returncode == 0, r.stderr
    r = bench("data", "bench", str(tmp_path / "t"), "--seq-len", "8", "--batch-size", "4", "--batches", "2",
              "--warmup", "1", "--repeats", "1", "--workers", "1", "--output", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr[-3000:]
    record = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
    assert record["format"] == "tokens" and [row["loader"] for row in record["rows"]] == ["torch", "tf"]
    assert all(row["tokens_per_sec"] == row["images_per_sec"] * 8 > 0 for row in record["rows"])
    assert record["cores_to_feed"] == {} and "tokens/s" in r.stdout
    r = bench("data", "bench", str(tmp_path / "t"), "--loaders", "dali")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].endswith(
        "the dali loader does not read tokens datasets (tokens): --loaders torch,tf")
