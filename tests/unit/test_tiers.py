"""The test tiers themselves: every test gets exactly one, the unit tier's guard, the system tier's pass cache
(tools/tier_cache.py) and the times summary (tools/times.py)."""

import subprocess
import sys

import pytest

from tests.conftest import ROOT, TESTS, TIERS, UnitTierViolation, misplaced, tier_of
from tools import tier_cache, times


def test_a_tests_folder_is_its_tier_and_its_marks_must_agree():
    assert TIERS == ("unit", "framework", "multiproc", "system")
    for tier in TIERS:
        assert tier_of(TESTS / tier / "test_x.py") == tier
        assert (TESTS / tier).is_dir() and (TESTS / tier / "__init__.py").is_file()
    assert tier_of(TESTS / "test_x.py") is None and tier_of(ROOT / "bench" / "cli.py") is None
    assert misplaced("unit", {"parametrize", "horovod"}) is None
    assert misplaced("multiproc", {"horovod", "gpu"}) is None
    assert misplaced("system", {"image"}) is None
    assert "move it" in misplaced("unit", {"multiproc"})
    assert "move it" in misplaced("framework", {"unit"})
    assert "move it to system/" in misplaced("multiproc", {"slurm"})
    assert "marker of what it needs" in misplaced("system", set())
    assert "one of tests/" in misplaced(None, set())
    assert misplaced("multiproc", {"alone"}) is None
    assert "only the multiproc tier" in misplaced("framework", {"alone"})
    assert misplaced("system", {"cluster", "smoke"}) is None
    assert "only a system tier has smoke tests" in misplaced("multiproc", {"smoke"})


def test_every_test_file_sits_in_a_tier_folder():
    loose = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert loose == [], f"test files outside tests/<tier>/: {loose}"


def test_the_unit_guard_refuses_a_process():
    with pytest.raises(UnitTierViolation, match="mark it multiproc"):
        subprocess.run(["true"])  # the guard replaced Popen for this unit test


def test_the_makefile_selects_each_tier_by_its_folders_marker():
    text = (ROOT / "Makefile").read_text()
    for tier in ("unit", "framework", "multiproc"):
        assert f"$(RUN_TESTS) {tier} -m {tier} $(or $(PYTEST_ARGS),tests/{tier})" in text
    assert "SYSTEM_TESTS = $(or $(PYTEST_ARGS),tests/system)" in text
    for target in ("test-unit", "test-framework", "test-multiproc", "test-system"):
        assert f"\n{target}:" in text and target in text.split("\ntest: ")[1].split("\n\n")[0]


# A tree of every class of input a system tier's key holds; tiers_key_tree() keys every tier over it.
KEY_TREE = {
    "bench/cli.py": "from bench.modes import registry\n",
    "bench/modes/__init__.py": "registry = 'bench.modes.torch_common'\n",
    "bench/modes/torch_common.py": "step = 1\n",
    "bench/records/__init__.py": "",
    "bench/records/env.py": "digest = 'read back'\n",
    "bench/records/schema.py": "version = 3\n",
    "bench/commands/__init__.py": "",
    "bench/commands/diagnose/__init__.py": "from bench import modes\nfrom bench.records import schema\n",
    "bench/commands/diagnose/rules.toml": "straggler = 0.9\n",
    "bench/__init__.py": "", "bench/__main__.py": "from bench import cli\n",
    "bench/models/__init__.py": "", "bench/models/torch_resnet.py": "depth = 18\n",
    "pyproject.toml": "[project]\n", "requirements/venv.txt": "torch==2.13.0\n",
    "Makefile": "# the tiers\ntest-slurm: venv ## system tier: Slurm\n\tpytest -m slurm\n",
    "README.md": "# hvdbench\n", "docs/running.md": "run it\n",
    "docker/Dockerfile": "FROM base\n", "docker/build-horovod.sh": "make\n", "docker/horovod/gcc13.patch": "+fix\n",
    "docker/cluster/Dockerfile": "FROM cpu\n", ".dockerignore": "*\n!bench\n",
    "tools/__init__.py": "", "tools/tier_cache.py": "cache\n", "tools/cluster.py": "nodes\n",
    "tools/sif.py": "pull\n", "singularity/slurm/common.sh": "sif\n", "k8s/examples/job.yaml": "kind: Job\n",
    "tests/conftest.py": "fixtures\n", "tests/system/__init__.py": "",
    "tests/system/test_slurm.py": "pytestmark = pytest.mark.slurm\n",
    "tests/system/test_images.py": "pytestmark = pytest.mark.image\n",
    "tests/system/test_image_cuda.py": "pytestmark = pytest.mark.image_cuda\n",
    "tests/system/test_cluster.py": "pytestmark = pytest.mark.cluster\n",
    "tests/system/test_diagnose_cluster.py": "pytestmark = pytest.mark.diagnose\n",
    "tests/system/test_kubernetes_pods.py": "pytestmark = pytest.mark.kubernetes\n",
    "tests/system/test_apptainer.py": "pytestmark = pytest.mark.apptainer\n",
    "tests/system/test_sif_pull.py": "pytestmark = [pytest.mark.apptainer, pytest.mark.sif_pull]\n",
    "tests/system/test_gpu_check.py": "pytestmark = pytest.mark.gpu_check\n", "tools/gpu-check.sh": "check\n",
}
TOOLS = {"docker version": "20.10.24", "docker image inspect": "sha256:base1", "srun --version": "slurm 22.05.8",
         "mpirun --version": "mpirun (Open MPI) 4.1.4", "dpkg-query": "libpmix2=4.2.2-1", "apptainer": "1.4.5"}


@pytest.fixture
def tiers_key_tree(tmp_path, monkeypatch):
    """Every tier's key over a copy of KEY_TREE in tmp_path, with the machine's tools and the venv faked: a
    function that gives {tier: key}; the tree, TOOLS and the venv's packages (the returned function's
    ``packages``) may be changed between calls."""
    for name, text in KEY_TREE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(tier_cache, "ROOT", tmp_path)
    monkeypatch.setattr(tier_cache, "measurement_age", lambda: (0, "abc1234"))  # measured just now
    monkeypatch.setattr(tier_cache, "listed", lambda paths: sorted(
        str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()
        and any(str(p.relative_to(tmp_path)) == q or str(p.relative_to(tmp_path)).startswith(q + "/") for q in paths)))
    tools = dict(TOOLS)
    monkeypatch.setattr(tier_cache, "run_quiet", lambda cmd: next(  # the longest prefix that matches
        (v for k, v in sorted(tools.items(), key=lambda kv: -len(kv[0])) if " ".join(cmd).startswith(k)), "absent"))
    monkeypatch.setattr(tier_cache, "apptainer_version", lambda: tools["apptainer"])
    packages = ["torch==2.13.0", "typer==0.29.0"]
    monkeypatch.setattr(tier_cache, "venv_packages", lambda: list(packages))

    def keys(part=None):
        return {tier: tier_cache.key(tier, part)[0] for tier in tier_cache.INPUTS
                if part is None or part in tier_cache.parts_of(tier)}
    keys.tools, keys.packages = tools, packages
    return keys


ALL = set(tier_cache.INPUTS)
# README's make bench in a bare Debian container: keyed by the set-up's files and the base image, never bench/
SETUP_ONLY = {"bare_debian"}
BENCH = ALL - SETUP_ONLY
DOCKER = {"image", "cluster", "image_cuda", "kubernetes", "apptainer", "sif_pull", "diagnose"}
SLURM = {"slurm", "cluster", "apptainer", "sif_pull", "diagnose"}


def changed_tiers(keys, tmp_path, name, text, part=None):
    before = keys(part)
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_text() if path.exists() else None
    path.write_text(text)
    after = keys(part)
    if old is None:
        path.unlink()
    else:
        path.write_text(old)
    assert keys(part) == before  # put back: the same keys again
    return {tier for tier in before if before[tier] != after[tier]}


@pytest.mark.parametrize("name, text, stale", [
    # the package: every tier but the pull's; diagnose by its import closure only
    ("bench/modes/torch_common.py", "step = 2\n", BENCH - {"sif_pull"}),
    ("bench/cli.py", "from bench.modes import registry  # edited\n", BENCH - {"sif_pull", "diagnose"}),
    # diagnose's too when it is code: its phases run `python -m bench` on the nodes (the CLI, the modes, every model)
    ("bench/cli.py", "from bench.modes import registry\nverbose = True\n", BENCH - {"sif_pull"}),
    ("bench/models/torch_resnet.py", "depth = 50\n", BENCH - {"sif_pull"}),
    ("bench/records/schema.py", "version = 4\n", BENCH - {"sif_pull"}),
    ("bench/records/env.py", "digest = 'another way'\n", BENCH - {"diagnose"}),
    ("bench/commands/diagnose/rules.toml", "straggler = 0.8\n", BENCH - {"sif_pull"}),
    ("bench/new_module.py", "x = 1\n", BENCH - {"sif_pull", "diagnose"}),  # a new (untracked) file
    # the venv's Horovod, how the package is built and installed
    ("docker/build-horovod.sh", "make -j2\n", ALL),
    ("docker/horovod/gcc13.patch", "+another fix\n", ALL),
    ("requirements/venv.txt", "torch==2.13.0\nrich\n", ALL - {"sif_pull"}),
    ("pyproject.toml", "[project]\nname = 'x'\n", ALL),
    # what reaches the images
    (".dockerignore", "*\n!bench\n!docs\n", DOCKER),
    ("docker/cluster/Dockerfile", "FROM cpu2\n", DOCKER - {"image_cuda"}),
    # each flavour's Dockerfile: the tiers of that flavour's images alone (the CUDA image's: image_cuda)
    ("docker/Dockerfile.cuda", "FROM runtime AS image\n", {"image_cuda"}),
    ("docker/Dockerfile", "FROM frameworks AS image\n", DOCKER - {"image_cuda"}),
    ("docker/stacks/current.env", "TORCH_VERSION=2.14.0\n", DOCKER),
    # a test of a tier's marker in any file of tests/system
    ("tests/system/test_more.py", "@pytest.mark.slurm\ndef test_x(): pass\n", {"slurm"}),
    ("tests/system/test_cluster.py", "pytestmark = pytest.mark.cluster\n# more\n", {"cluster"}),
    ("tests/system/test_sif_pull.py", "pytestmark = [pytest.mark.apptainer, pytest.mark.sif_pull]\n#\n",
     {"apptainer", "sif_pull"}),
    ("tests/conftest.py", "fixtures 2\n", ALL),
    # the tiers' own files
    ("k8s/examples/job.yaml", "kind: Job\nspec: {}\n", {"kubernetes"}),
    ("tools/gpu-check.sh", "check --short\n", {"gpu_check"}),
    ("tests/system/test_gpu_check.py", "pytestmark = pytest.mark.gpu_check\n# more\n", {"gpu_check"}),
    ("singularity/slurm/common.sh", "sif 2\n", {"slurm", "cluster", "apptainer"}),
    # the Makefile as make runs it, not its comments or help texts
    ("Makefile", "# the tiers, renamed\ntest-slurm: venv ## system tier: Slurm here\n\tpytest -m slurm\n", set()),
    ("Makefile", "test-slurm: venv ## system tier: Slurm\n\tpytest -x -m slurm\n", ALL),
    # helpers a tier runs beside its tests: the benchmarks' package (the slurm, apptainer and gpu_check tiers import
    # it), compose's choice for the image tier, the SIF fixtures the contract and the pull take
    ("tools/benchmarks/__init__.py", "results = 2\n", BENCH),
    ("tools/benchmarks/endings.py", "gone = 2\n", BENCH),
    ("tools/cluster.py", "nodes 2\n", {"image", "cluster", "diagnose", "apptainer"}),
    ("tests/system/test_apptainer.py", "pytestmark = pytest.mark.apptainer\n# more\n",
     {"apptainer", "sif_pull", "image", "image_cuda"}),
    # how a SIF is made: the CPU SIFs' tier, the pull's, and the CUDA image's (its contract runs in its SIF)
    ("tools/sif.py", "pull 2\n", {"apptainer", "sif_pull", "image_cuda"}),
    # README's set-up from nothing: its scripts, the base image's tool, its own test; never bench/ (above)
    ("tools/setup.sh", "apt-get install more\n", ALL - {"sif_pull"}),
    ("tools/images.py", "base = 'trixie'\n", DOCKER | SETUP_ONLY),
    ("tests/system/test_bare_debian.py", "pytestmark = pytest.mark.bare_debian\n# more\n", SETUP_ONLY),
    # the docs: no tier
    ("README.md", "# hvdbench, reworded\n", set()),
    ("docs/running.md", "run it again\n", set()),
])
def test_a_tier_goes_stale_on_every_class_of_its_inputs(tiers_key_tree, tmp_path, name, text, stale):
    assert changed_tiers(tiers_key_tree, tmp_path, name, text) == stale


@pytest.mark.parametrize("tool, value, stale", [
    ("docker version", "29.0.1", DOCKER | SETUP_ONLY), ("docker image inspect", "sha256:base2", DOCKER | SETUP_ONLY),
    # the frameworks stage each flavour's images are built on
    ("docker image inspect --format {{.Id}} hvdbench:current-cpu-frameworks", "sha256:cpu2", DOCKER - {"image_cuda"}),
    ("docker image inspect --format {{.Id}} hvdbench:current-cuda-frameworks", "sha256:cuda2", {"image_cuda"}),
    ("srun --version", "slurm 23.11", SLURM), ("mpirun --version", "mpirun (Open MPI) 5.0", SLURM),
    ("dpkg-query", "libpmix2=5.0.1", SLURM), ("apptainer", "1.5.0", {"apptainer", "sif_pull", "image_cuda"}),
])
def test_a_tier_goes_stale_when_a_tool_it_calls_changes(tiers_key_tree, tool, value, stale):
    before = tiers_key_tree()
    tiers_key_tree.tools[tool] = value
    after = tiers_key_tree()
    assert {tier for tier in before if before[tier] != after[tier]} == stale


def test_the_venvs_part_holds_its_interpreter(tmp_path, monkeypatch):
    """A patch release of Python changes no distribution's name: the venv's part names the interpreter's version
    (pyvenv.cfg) and its lib/pythonX.Y, so the tiers go stale on it."""
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site / "typer-0.29.2.dist-info").mkdir(parents=True)
    (tmp_path / ".hvdbench-ready").touch()
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.2\n")
    monkeypatch.setenv("VENV", str(tmp_path))
    assert tier_cache.venv_packages() == ["lib/python3.11", "python==3.11.2", "typer==0.29.2"]
    (tmp_path / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.9\n")
    assert "python==3.11.9" in tier_cache.venv_packages()


def test_every_tier_goes_stale_when_the_venv_resolves_another_version(tiers_key_tree):
    before = tiers_key_tree()
    tiers_key_tree.packages[1] = "typer==0.30.0"
    after = tiers_key_tree()
    assert all(before[tier] != after[tier] for tier in ALL)


# torch_common.py with a function the lower tiers ran (step) and one they did not (on_gpu), as measured in
# tools/lower-covered.txt; the module's own code ran too.
STEP = "def step(x):\n    return x + 1\n"
ON_GPU = "def on_gpu(x):\n    return x.cuda()\n"
COVERED = "# measured\nbench/modes/torch_common.py:<module>\nbench/modes/torch_common.py:step\n"
SMOKE = {"slurm", "image", "kubernetes", "cluster", "image_cuda", "apptainer"}
PACKAGE_TIERS = BENCH - {"sif_pull"}  # keyed by bench/ (diagnose by its import closure, in which torch_common is)


@pytest.mark.parametrize("text, whole, features", [
    # a function the lower tiers run: each tier's smoke tests only
    (f"{STEP.replace('+ 1', '+ 2')}\n{ON_GPU}", SMOKE, set()),
    (f"step = 1\n{STEP.replace('+ 1', '+ 2')}\n{ON_GPU}", SMOKE, set()),  # module-level code ran too
    # one they do not run, or did not exist when measured: every test of every tier bench/ reaches
    (f"{STEP}\n{ON_GPU.replace('cuda', 'to')}", SMOKE, PACKAGE_TIERS),
    (f"{STEP}\n{ON_GPU}\n\ndef added():\n    return 0\n", SMOKE, PACKAGE_TIERS),
    (f"{STEP.replace('step', 'step2')}\n{ON_GPU}", SMOKE, PACKAGE_TIERS),  # renamed: not measured under it
    # the surface is read as syntax: a comment or a blank line there reruns only what reads the bytes
    (f"{STEP}\n{ON_GPU.replace('x.cuda()', 'x.cuda()  # to the GPU')}\n\n", SMOKE, set()),
])
def test_only_the_smoke_tests_rerun_for_code_the_lower_tiers_run(tiers_key_tree, tmp_path, text, whole, features):
    (tmp_path / "bench/modes/torch_common.py").write_text(f"{STEP}\n{ON_GPU}")
    (tmp_path / "tools/lower-covered.txt").write_text(COVERED)
    assert changed_tiers(tiers_key_tree, tmp_path, "bench/modes/torch_common.py", text, "whole") == whole
    assert changed_tiers(tiers_key_tree, tmp_path, "bench/modes/torch_common.py", text, "features") == features


def test_a_stale_measurement_reruns_every_feature_for_code_the_lower_tiers_run(tiers_key_tree, tmp_path,
                                                                              monkeypatch):
    """Past STALE_AFTER commits since tools/lower-covered.txt was measured, a unit it lists as run may no longer be
    (a test taken out): the features are keyed by bench/ whole, and each key says why."""
    (tmp_path / "bench/modes/torch_common.py").write_text(f"{STEP}\n{ON_GPU}")
    (tmp_path / "tools/lower-covered.txt").write_text(COVERED)
    text = f"{STEP.replace('+ 1', '+ 2')}\n{ON_GPU}"  # a function the lower tiers ran: smoke tests only, above
    monkeypatch.setattr(tier_cache, "measurement_age", lambda: (tier_cache.STALE_AFTER, "abc1234"))
    assert changed_tiers(tiers_key_tree, tmp_path, "bench/modes/torch_common.py", text, "features") == set()
    monkeypatch.setattr(tier_cache, "measurement_age", lambda: (tier_cache.STALE_AFTER + 1, "abc1234"))
    assert changed_tiers(tiers_key_tree, tmp_path, "bench/modes/torch_common.py", text, "features") == PACKAGE_TIERS
    why = [line for line in tier_cache.key("image", "features")[1] if "not its surface" in line]
    assert why and f"measured {tier_cache.STALE_AFTER + 1} commits" in why[0] and "make test-surface" in why[0]
    monkeypatch.setattr(tier_cache, "measurement_age", lambda: (None, "abc1234"))  # a commit git does not have
    assert "names no commit git finds here" in tier_cache.surface_stale()


def test_a_new_measurement_changes_the_features_keys_only(tiers_key_tree, tmp_path):
    (tmp_path / "bench/modes/torch_common.py").write_text(f"{STEP}\n{ON_GPU}")
    (tmp_path / "tools/lower-covered.txt").write_text(COVERED)
    assert changed_tiers(tiers_key_tree, tmp_path, "tools/lower-covered.txt", COVERED + "bench/modes/torch_common"
                         ".py:on_gpu\n", "features") == PACKAGE_TIERS
    assert changed_tiers(tiers_key_tree, tmp_path, "tools/lower-covered.txt", "", "whole") == set()


def test_every_system_test_file_and_marker_belongs_to_a_key(monkeypatch):
    """A tests/system file with no tier's marker, or a system marker no tier selects, would run nowhere or never
    make its tier stale."""
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests/system").glob("test_*.py"))
    monkeypatch.setattr(tier_cache, "listed", lambda paths: files)  # in process: the files, not git's listing
    keyed = {name for marker in tier_cache.MARKERS.values() for name in tier_cache.marked(marker)}
    assert [name for name in files if name not in keyed] == []
    general = {"unit", "framework", "multiproc", "system", "alone", "gpu", "horovod", "smoke"}
    declared = {line.split(":")[0].strip().strip('"') for line in
                (ROOT / "pyproject.toml").read_text().split("markers = [")[1].split("]")[0].splitlines()
                if ":" in line}
    assert declared - general == set(tier_cache.MARKERS.values())
    makefile = (ROOT / "Makefile").read_text()
    for tier, marker in tier_cache.MARKERS.items():
        assert f"fresh {tier} ||" in makefile and f"record {tier};" in makefile
        assert f' -m "{marker}' in makefile or f" -m {marker} " in makefile
        # a tier with smoke tests has some in a file of its marker, and its target narrows to them when told
        smoke = [name for name in tier_cache.marked(marker) if "@pytest.mark.smoke" in (ROOT / name).read_text()]
        assert bool(smoke) == (tier in tier_cache.SMOKE), (tier, smoke)
        assert (f"$$($(TIER_CACHE) select {tier})\"" in makefile) == (tier in tier_cache.SMOKE), tier



def test_every_tool_a_keyed_script_calls_is_keyed_with_it():
    """A set-up script's helper (tools/NAME.py or tools/NAME.sh, however it is called) is in every key its caller
    is in: a change to it changes what the tiers run on."""
    import re

    for script in [name for name in tier_cache.SETUP if name.endswith(".sh")]:
        called = {f"tools/{m.group(2)}.{'py' if m.group(1) == '.' else m.group(3)}"
                  for line in (ROOT / script).read_text().splitlines() if not line.lstrip().startswith("#")
                  for m in re.finditer(r"tools([./])([a-z_-]+)(?:\.(sh|py))?", line) if m.group(1) == "." or m.group(3)}
        assert sorted(called - set(tier_cache.SETUP)) == [], script

def test_the_makefile_is_keyed_as_make_reads_it():
    text = b"# comment\nvenv: $(STAMP) ## the venv\n\t# a recipe comment\n\ttools/setup.sh\nX ?= 1\n"
    assert tier_cache.makefile_text(text) == b"venv: $(STAMP)\n\ttools/setup.sh\nX ?= 1"


def test_the_times_summary_reads_every_tier(tmp_path, capsys, monkeypatch):
    (tmp_path / "unit.wall").write_text("12 0\n")
    (tmp_path / "unit.xml").write_text(
        '<testsuites><testsuite><testcase classname="tests.test_a" name="test_x" time="3.5"/>'
        '<testcase classname="tests.test_a" name="test_y" time="0.1"><skipped/></testcase>'
        '</testsuite></testsuites>')
    (tmp_path / "image.wall").write_text("0 0 cached\n")
    (tmp_path / "make-test.total").write_text("75\n")
    (tmp_path / "system-prepare.beside").write_text("61 0\n")
    (tmp_path / "venv.took").write_text("9 0\n")
    monkeypatch.setattr(sys, "argv", ["test-times", str(tmp_path)])
    times.main()
    out = capsys.readouterr().out
    assert "unit" in out and "0m12s" in out and "passed before on the same inputs" in out
    assert "make test           1m15s  of which 1m03s outside" in out  # 75 s in all, 12 s in the tiers
    assert "venv                0m09s  its set-up, first (make venv, exit 0)" in out  # not a tier: not in the 12 s
    assert "system set-up       1m01s  beside the venv's and the first tiers (make test-system-prepare, exit 0" in out
    assert "3.5  unit            tests.test_a::test_x" in out
    assert out.strip().splitlines()[-1] == "all: 1 passed, 0 failed, 1 skipped"


def tier_cache_cli(tmp_path, monkeypatch, key):
    """tools.tier_cache's command line in process, its passes and times under tmp_path and ``key(tier, part)``
    for the inputs' key: a function of the arguments that returns the exit code."""
    monkeypatch.setattr(tier_cache, "CACHE", tmp_path / "passes")
    monkeypatch.setenv("HVDBENCH_TEST_TIMES", str(tmp_path / "times"))
    monkeypatch.delenv("HVDBENCH_RERUN", raising=False)
    monkeypatch.delenv("PYTEST_ARGS", raising=False)
    monkeypatch.setattr(tier_cache, "key_parts", lambda tier, part=None: (
        key(tier, part or tier_cache.parts_of(tier)[0])[0], "less-venv-" + key(tier, part)[0], key(tier, part)[1]))
    monkeypatch.setattr(tier_cache, "venv_packages", lambda: ["torch==2.13.0"])

    def call(*argv):
        monkeypatch.setattr(sys, "argv", ["tier-cache", *argv])
        try:
            tier_cache.main()
            return 0
        except SystemExit as exc:
            return exc.code
    return call


def test_a_recorded_pass_skips_only_the_same_inputs(tmp_path, monkeypatch, capsys):
    inputs = {"key": "a" * 64}
    call = tier_cache_cli(tmp_path, monkeypatch, lambda tier, part: (inputs["key"], []))

    assert call("fresh", "image") == 1  # never passed
    assert call("record", "image") == 0
    assert call("fresh", "image") == 0 and "passed at" in capsys.readouterr().out
    assert (tmp_path / "times" / "image.wall").read_text().split() == ["0", "0", "cached"]
    monkeypatch.setenv("HVDBENCH_RERUN", "1")
    assert call("fresh", "image") == 1
    monkeypatch.delenv("HVDBENCH_RERUN")
    inputs["key"] = "b" * 64  # an input changed
    assert call("fresh", "image") == 1
    monkeypatch.setenv("PYTEST_ARGS", "-k one_test")
    call("record", "image")  # a partial run records nothing
    monkeypatch.delenv("PYTEST_ARGS")
    assert call("fresh", "image") == 1


def test_stale_names_the_tiers_that_would_run_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """`stale T...` (what make test-system-prepare asks before building for those tiers): exit 0 naming the tiers
    without a pass on their current inputs, 1 when every one has; no times file either way."""
    call = tier_cache_cli(tmp_path, monkeypatch, lambda tier, part: (tier * 8, []))

    assert call("stale", "image", "cluster") == 0
    assert capsys.readouterr().out.split()[-2:] == ["image", "cluster"]
    assert call("record", "image") == 0
    assert call("stale", "image", "cluster") == 0
    assert capsys.readouterr().out.split()[-1] == "cluster"
    assert call("record", "cluster") == 0
    assert call("stale", "image", "cluster") == 1
    assert "stale: none" in capsys.readouterr().out
    assert not (tmp_path / "times").exists()
    monkeypatch.setenv("HVDBENCH_RERUN", "1")
    assert call("stale", "cluster") == 0
    assert call("fresh", "image", "cluster") == 2  # fresh, record and key take one tier


def test_select_narrows_a_tier_to_its_smoke_tests_while_its_features_passed(tmp_path, monkeypatch, capsys):
    keys = {"whole": "w1", "features": "f1"}
    call = tier_cache_cli(tmp_path, monkeypatch, lambda tier, part: (keys[part or "whole"] * 32, []))

    assert call("select", "cluster") == 0 and capsys.readouterr().out == ""  # never passed: every test
    assert call("record", "cluster") == 0 and call("fresh", "cluster") == 0
    keys["whole"] = "w2"  # a change the lower tiers run: bench/ differs, its surface does not
    assert call("fresh", "cluster") == 1
    capsys.readouterr()
    assert call("select", "cluster") == 0 and capsys.readouterr().out == " and smoke\n"
    assert call("record", "cluster") == 0 and call("fresh", "cluster") == 0  # the smoke run passed
    capsys.readouterr()
    keys["whole"], keys["features"] = "w3", "f2"  # and one the lower tiers do not run: every test
    assert call("select", "cluster") == 0 and capsys.readouterr().out == ""
    keys["whole"], keys["features"] = "w1", "f1"  # back to the first state: passed before
    assert call("fresh", "cluster") == 0 and "passed at" in capsys.readouterr().out
    monkeypatch.setenv("HVDBENCH_RERUN", "1")
    keys["whole"] = "w4"
    assert call("select", "cluster") == 0 and capsys.readouterr().out == ""
    monkeypatch.delenv("HVDBENCH_RERUN")
    assert call("select", "diagnose") == 0 and capsys.readouterr().out == ""  # no smoke tests: features only


def test_blocked_names_what_a_machine_without_root_or_docker_cannot_run():
    """make test asks this first: without root every system tier but the GPU check's short form is named; as root
    with no engine and nothing to install one with, the Docker tiers; as root otherwise, none."""
    without_root = tier_cache.blocked(euid=1000)
    assert set(without_root) == set(tier_cache.INPUTS) - {"gpu_check"}
    assert all("needs root" in why for why in without_root.values())
    no_docker = tier_cache.blocked(euid=0, docker_answers=False, can_install=False)
    assert set(no_docker) == tier_cache.DOCKER_TIERS and "slurm" not in no_docker
    assert tier_cache.blocked(euid=0, docker_answers=False, can_install=True) == {}
    assert tier_cache.blocked(euid=0, docker_answers=True, can_install=False) == {}


def test_make_test_skips_the_blocked_tiers_and_fails_naming_them():
    """The Makefile's test target asks `blocked` before anything else, starts no set-up when a tier is blocked,
    passes the names to test-system, and ends non-zero naming them; test-system's list is every tier's."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("\ntest: ", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("$(TIER_CACHE) blocked") < recipe.index("setsid")
    assert 'test-system SKIP_TIERS="$$blocked"' in recipe and "not run here" in recipe
    listed = text.split("\nSYSTEM_TIERS = ", 1)[1].split("\nSKIP_TIERS", 1)[0].replace("\\\n", " ").split()
    assert sorted(t.split(":")[0] for t in listed) == sorted(tier_cache.INPUTS)
