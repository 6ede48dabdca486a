"""tools/surface.py: bench/'s code units, which of them the lower tiers ran, and the surface the system tiers'
feature tests are keyed by."""

from tools import surface

SOURCE = '''"""A module."""
import os

LIMIT = 3


def short(x): return x


@decorated
def step(x):
    """Docstring."""
    def inner(y):
        return y + 1
    return inner(x)


class Trainer:
    size = 2

    def run(self):
        return 1

    class Options:
        def parse(self):
            return {}
'''


def test_a_unit_is_a_function_or_method_and_the_rest_is_the_module():
    found = surface.units("bench/m.py", SOURCE)
    assert sorted(found) == ["bench/m.py:<module>", "bench/m.py:Trainer.Options.parse", "bench/m.py:Trainer.run",
                             "bench/m.py:short", "bench/m.py:step"]  # inner is part of step
    lines = SOURCE.splitlines()
    step = [lines[n - 1].strip() for n in found["bench/m.py:step"][1]]
    assert step == ['"""Docstring."""', "def inner(y):", "return y + 1", "return inner(x)"]
    module = {lines[n - 1].strip() for n in found["bench/m.py:<module>"][1]}
    assert {"LIMIT = 3", "@decorated", "def step(x):", "size = 2", "class Trainer:"} <= module
    assert "return inner(x)" not in module and "return 1" not in module
    assert list(found["bench/m.py:short"][1]) == []  # one line, run at import: never counted as covered


def test_a_unit_is_covered_when_a_line_of_its_body_ran(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench/m.py").write_text(SOURCE)
    lines = SOURCE.splitlines()
    at = {text: n for n, text in enumerate(lines, 1)}
    ran = {at["LIMIT = 3"], at["def step(x):"], at["def short(x): return x"], at["        return 1"]}
    names = surface.covered_units({"bench/m.py": ran}, tmp_path, ["bench/m.py"])
    assert names == ["bench/m.py:<module>", "bench/m.py:Trainer.run"]  # not step: only its def line ran


def test_the_surface_is_the_source_of_what_was_not_covered(tmp_path):
    (tmp_path / "bench").mkdir()
    (tmp_path / "tools").mkdir()
    (tmp_path / "bench/m.py").write_text(SOURCE)
    (tmp_path / "bench/rules.toml").write_text("x = 1\n")
    (tmp_path / "tools/lower-covered.txt").write_text("# measured\nbench/m.py:<module>\nbench/m.py:step\n")
    digest, names = surface.surface(tmp_path, ["bench/m.py", "bench/rules.toml"])
    assert names == ["bench/m.py:Trainer.Options.parse", "bench/m.py:Trainer.run", "bench/m.py:short",
                     "bench/rules.toml"]
    (tmp_path / "bench/m.py").write_text(SOURCE.replace("return y + 1", "return y + 2"))  # in step: covered
    assert surface.surface(tmp_path, ["bench/m.py", "bench/rules.toml"])[0] == digest
    (tmp_path / "bench/m.py").write_text(SOURCE.replace("return 1", "return 1  # one"))  # a comment
    assert surface.surface(tmp_path, ["bench/m.py", "bench/rules.toml"])[0] == digest
    (tmp_path / "bench/m.py").write_text(SOURCE.replace("return 1", "return 2"))
    assert surface.surface(tmp_path, ["bench/m.py", "bench/rules.toml"])[0] != digest
    (tmp_path / "bench/m.py").write_text(SOURCE)
    (tmp_path / "bench/rules.toml").write_text("x = 2\n")  # not Python: read whole
    assert surface.surface(tmp_path, ["bench/m.py", "bench/rules.toml"])[0] != digest
    (tmp_path / "tools/lower-covered.txt").unlink()  # never measured: all of it
    assert len(surface.surface(tmp_path, ["bench/m.py"])[1]) == 5


def test_the_measurement_on_record_names_units_that_exist():
    """tools/lower-covered.txt was measured on this bench/: most of what it names still exists (names that went
    away are harmless, but many of them mean it is stale: measure again)."""
    known = surface.covered()
    assert known, "tools/lower-covered.txt is missing: python -m tools.surface measure"
    files = [p.relative_to(surface.ROOT).as_posix() for p in (surface.ROOT / "bench").rglob("*.py")]
    every = {name for path in files for name in surface.units(path, (surface.ROOT / path).read_text())}
    gone = sorted(known - every)
    assert len(gone) <= 0.1 * len(known), f"{len(gone)} measured units are gone, e.g. {gone[:5]}: measure again"
