"""The training-FLOP count's cache (bench.models): in process, the count itself replaced (its value is checked
in tests/test_schema.py)."""

from types import SimpleNamespace

import pytest


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


@pytest.mark.multiproc
@pytest.mark.framework
def test_a_process_without_torch_gets_the_count_from_the_torch_environment(tmp_path, monkeypatch):
    """A TensorFlow rank in the CUDA image has no PyTorch: the count comes from the PyTorch environment's
    interpreter (HVDBENCH_PYTHON_TORCH), the same figure as the in-process count; with no such environment,
    none (never another model's or a guess)."""
    import sys

    from bench import models

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # a cold cache: the other interpreter really counts
    expected = models.count_train_flops("resnet50", 32, None, 10)
    assert expected and expected > 0
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now fails in this process
    monkeypatch.setattr(models.envs, "interpreter", lambda framework: sys.executable)
    assert models.count_train_flops("resnet50", 32, None, 10) == expected
    assert list((tmp_path / "hvdbench" / "flops").glob("*.json"))  # counted and kept by the other environment
    monkeypatch.setattr(models.envs, "interpreter", lambda framework: None)
    assert models.count_train_flops("resnet50", 32, None, 10) is None
    assert models.count_in_torch_environment("resnet50", 32, None, 10, python=str(tmp_path / "no-python")) is None


@pytest.mark.multiproc
@pytest.mark.framework
def test_a_tensorflow_process_counts_in_a_child_and_never_loads_torch(tmp_path):
    """A process with TensorFlow loaded never loads PyTorch (beside TensorFlow, PyPI's PyTorch and its Triton
    crashed ranks with SIGSEGV): with a cold cache it counts in a child interpreter, the same figure as a
    PyTorch process's count, and keeps it for the next run."""
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("HVDBENCH_FLOPS_CACHE", None)
    script = ("import json, sys; from bench import tfutil; tfutil.import_tf(); "
              "from bench.models import count_train_flops; n = count_train_flops('resnet50', 32, None, 10); "
              "print(json.dumps([n, 'torch' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    flops, torch_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert torch_loaded is False
    torch_count = subprocess.run([sys.executable, "-c", "import json; from bench.models import count_train_flops; "
                                  "print(json.dumps(count_train_flops('resnet50', 32, None, 10)))"],
                                 env=dict(env, XDG_CACHE_HOME=str(tmp_path / "other")), capture_output=True,
                                 text=True, timeout=600, check=True).stdout
    assert flops == json.loads(torch_count.strip().splitlines()[-1]) and flops > 0
    assert list((tmp_path / "hvdbench" / "flops").glob("*.json"))  # kept by the child for the next run
