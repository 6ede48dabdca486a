"""The package's shape: no import loop, local imports only where they keep a heavy library off the start-up
path, each part below the ones that use it, and ruff reading every file."""

import pytest

from tools import imports


def test_no_import_loop_and_no_needless_local_import():
    report = imports.report()
    assert report["loops"] == []
    assert report["needless"] == []
    assert report["kept"]  # the heavy modules (torch's) are still kept off the start-up path


def test_the_tool_finds_a_loop_and_a_needless_local_import(tmp_path):
    """The check above can fail: a planted loop through a function-local import, and a local import of a
    light module, are both reported."""
    package = tmp_path / "bench"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from bench import b\n")
    (package / "b.py").write_text("def f():\n    from bench import a\n    return a\n")
    (package / "c.py").write_text("import torch\n")
    (package / "d.py").write_text("def g():\n    from bench import c\n    return c\n")
    report = imports.report(package)
    assert report["loops"] == [["bench.a", "bench.b"]]
    assert report["needless"] == ["bench.b:2 -> bench.a"]
    assert report["kept"] == ["bench.d:2 -> bench.c"]


def module_imports(name: str) -> set[str]:
    modules = imports.scan()
    mod = modules[name]
    return mod.top | {t for t, _ in mod.local}


@pytest.mark.parametrize("lower, upper", [
    ("bench.launching", ("bench.modes", "bench.models", "bench.distributed", "bench.commands", "bench.run")),
    ("bench.distributed", ("bench.modes", "bench.commands", "bench.run")),
    ("bench.measure", ("bench.commands", "bench.run", "bench.cli", "bench.records")),
    ("bench.data", ("bench.commands", "bench.run", "bench.cli", "bench.records")),
    ("bench.records", ("bench.commands", "bench.run", "bench.cli")),
    ("bench.run", ("bench.commands",)),
    ("bench.vocabulary", ("bench.",)),
])
def test_each_part_sits_below_the_parts_that_use_it(lower, upper):
    modules = imports.scan()
    for name in modules:
        if name == lower or name.startswith(lower + "."):
            wrong = {t for t in module_imports(name) if t.startswith(upper)}
            assert not wrong, f"{name} imports {sorted(wrong)}"


def test_the_allreduce_backends_build_on_the_distributed_layer_not_on_the_modes():
    modules = imports.scan()
    for name in modules:
        if name.startswith("bench.commands.allreduce"):
            assert not {t for t in module_imports(name) if t.startswith("bench.modes")}, name
