"""The training-FLOP count in processes of their own: counted in a child, and from the other framework's
environment (the cache in process: tests/unit/; the count's value: tests/framework/test_schema.py)."""


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
