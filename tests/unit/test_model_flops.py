"""The training-FLOP count's cache (bench.models): in process, the count itself replaced (its value is checked
in tests/framework/test_schema.py)."""

from types import SimpleNamespace


def test_counted_flops_are_kept_by_everything_they_depend_on(tmp_path, monkeypatch):
    """The FLOP count's cache: a second run reads it without counting; another PyTorch version, input shape or
    builder source counts again; HVDBENCH_FLOPS_CACHE=off and an unwritable cache still give the count."""
    from bench import models

    counts = []

    def count(name, image_size, seq_len, num_classes):
        counts.append((name, image_size))
        return 1000.0 * image_size

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("HVDBENCH_FLOPS_CACHE", raising=False)
    monkeypatch.setattr(models, "count_train_flops", count)
    monkeypatch.setattr(models.importlib.metadata, "version", lambda name: "2.13.0")

    def flops(image_size=32, model="resnet50"):
        models._train_flops.cache_clear()  # a new process: only the files remain
        return models._train_flops(model, image_size, None, 10)

    try:
        assert flops() == 32000.0 and flops() == 32000.0 and len(counts) == 1
        assert flops(64) == 64000.0 and len(counts) == 2  # another input shape
        monkeypatch.setattr(models.importlib.metadata, "version", lambda name: "2.14.0")
        assert flops() == 32000.0 and len(counts) == 3  # another PyTorch
        source = tmp_path / "builder.py"
        source.write_text("def build(num_classes): ...\n")
        monkeypatch.setattr(models.importlib.util, "find_spec", lambda name: SimpleNamespace(origin=str(source)))
        flops()
        source.write_text("def build(num_classes): return 'another network'\n")
        assert flops() == 32000.0 and len(counts) == 5  # the builder changed
        monkeypatch.setenv("HVDBENCH_FLOPS_CACHE", "off")
        assert flops() == 32000.0 and len(counts) == 6  # off: counted every time
        monkeypatch.delenv("HVDBENCH_FLOPS_CACHE")
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a-file"))
        (tmp_path / "a-file").write_text("not a folder")
        assert flops(48) == 48000.0  # the cache cannot be written: the count still comes back

        def no_torch(name):
            raise models.importlib.metadata.PackageNotFoundError(name)

        monkeypatch.setattr(models.importlib.metadata, "version", no_torch)
        assert models._flops_key("resnet50", 32, None, 10) is None  # no PyTorch: nothing read from the cache
    finally:
        models._train_flops.cache_clear()
