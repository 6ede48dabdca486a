"""Each bench process's temporary folder of its own (bench.scratch), in real Python processes ended normally and
killed outright, TensorFlow's among them; a rank lost in a real run leaves nothing else: test_checkpoint.py. Which
folders are removed: tests/unit/test_scratch.py."""

import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from bench import scratch
from tests.conftest import ROOT

# a bench process's start, then what a library does with the temporary folder; ends as argv[1] says
PROCESS = textwrap.dedent("""
    import os, sys, tempfile
    from bench import scratch
    own = scratch.take()
    import multiprocessing.util
    scratch.use_for_multiprocessing()
    print(own, tempfile.gettempdir(), multiprocessing.util.get_temp_dir(), sep="\\n")
    scratch.use_for_python()
    handle, name = tempfile.mkstemp(prefix="library-")
    print(name, tempfile.gettempdir(), sep="\\n", flush=True)
    if sys.argv[1] == "killed":
        os._exit(9)
    if sys.argv[1] == "waits":
        sys.stdin.read()
""")


@pytest.fixture
def root():
    """A temporary folder of a short path, as /tmp is: pytest's own are too deep for a socket's path (107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="scratch-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start(root, ending: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PROCESS, ending], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, TMPDIR=str(root)))


def test_a_process_keeps_its_temporary_files_in_its_own_folder_and_removes_it_at_exit(root):
    proc = start(root, "ends")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == "", err  # multiprocessing's own removal ran first, without error
    own, before, mp_dir, library, after = out.split()
    assert os.path.dirname(own) == str(root) and os.path.basename(own).startswith(scratch.PREFIX)
    assert before == str(root)  # until use_for_python, Python's temporary folder is the system's
    assert os.path.dirname(mp_dir) == own and os.path.dirname(library) == own and after == own
    assert list(root.iterdir()) == []


def test_what_a_process_killed_outright_leaves_is_its_folder_which_the_next_one_removes(root):
    proc = start(root, "killed")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 9
    own, library = out.split()[0], out.split()[3]
    assert [p.name for p in root.iterdir()] == [os.path.basename(own)]  # the file, pymp-*: all inside
    assert os.path.exists(library)
    assert scratch.remove_orphaned(root, scratch.PREFIX) == []  # younger than a minute: perhaps not held yet
    os.utime(own, (0, 0))
    assert [str(p) for p in scratch.remove_orphaned(root, scratch.PREFIX)] == [own]
    assert list(root.iterdir()) == []


def test_the_folder_of_a_running_process_is_kept(root):
    proc = start(root, "waits")
    try:
        own, *_, after = (proc.stdout.readline().strip() for _ in range(5))  # the last: its file made, it waits
        assert after == own, after
        os.utime(own, (0, 0))
        assert scratch.remove_orphaned(root, scratch.PREFIX) == []  # held
    finally:
        proc.communicate("", timeout=60)
    assert proc.returncode == 0 and list(root.iterdir()) == []


def test_importing_bench_takes_no_folder(root):
    """Only a bench process (bench.cli.main) takes one: code that imports bench keeps Python's temporary folder."""
    code = "import tempfile; from bench import scratch; scratch.use_for_python(); scratch.use_for_multiprocessing(); " \
           "print(tempfile.gettempdir())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, TMPDIR=str(root))).stdout
    assert out.strip() == str(root) and list(root.iterdir()) == []


def test_multiprocessing_imported_first_keeps_its_folder_where_it_was(root):
    """Its exit handler, registered before ours, would run after ours and find its folder gone: nothing moves."""
    code = textwrap.dedent("""
        import multiprocessing.util, tempfile
        from bench import scratch
        scratch.take()
        scratch.use_for_multiprocessing()
        scratch.use_for_python()
        print(multiprocessing.util.get_temp_dir(), tempfile.gettempdir())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, TMPDIR=str(root)))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    mp_dir, python = r.stdout.split()
    assert os.path.dirname(mp_dir) == python == str(root) and list(root.iterdir()) == []


def test_bench_takes_its_folder_before_multiprocessing_is_imported():
    """bench.cli.main takes the folder first thing: importing bench.cli must not import multiprocessing."""
    code = "import sys, bench.cli; print('multiprocessing.util' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert r.stdout.strip() == "False"


def test_tensorflow_autograph_files_of_a_process_killed_outright_are_in_its_folder(tmp_path, root):
    """autograph writes each function it converts as a file that only an exit handler removes."""
    script = tmp_path / "convert.py"  # autograph reads the function's source file
    script.write_text(textwrap.dedent("""
        import os
        from bench import scratch
        scratch.take()
        from bench.tfutil import import_tf
        tf, _ = import_tf()

        @tf.function
        def magnitude(x):
            if x > 0:  # a condition on a tensor: autograph converts the function
                return x
            return -x

        magnitude(tf.constant(2.0))
        os._exit(9)
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, TMPDIR=str(root), PYTHONPATH=str(ROOT)))
    assert r.returncode == 9, r.stderr[-2000:]
    (own,) = root.iterdir()
    assert own.name.startswith(scratch.PREFIX)
    assert [p for p in own.iterdir() if p.name.startswith("__autograph_generated_file")]


@pytest.mark.parametrize("deep", [False, True])
def test_a_fork_server_starts_however_deep_the_temporary_folder(root, deep):
    """A Unix socket's path holds 107 bytes: under a $TMPDIR of 70 bytes multiprocessing's sockets fit but not
    inside the process's own folder, so multiprocessing keeps its folder in the system's, as it did; under /tmp
    it goes inside the process's own."""
    if deep:
        root = root / ("d" * (70 - len(str(root)) - 1))
        root.mkdir()
    code = textwrap.dedent("""
        import tempfile
        from bench import scratch
        scratch.take()
        import multiprocessing, multiprocessing.util
        scratch.use_for_multiprocessing()
        scratch.use_for_python()
        if __name__ == "__main__":
            server = multiprocessing.get_context("forkserver").Process(target=print)
            server.start()
            server.join()
            print(server.exitcode, multiprocessing.util.get_temp_dir(), tempfile.gettempdir())
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, TMPDIR=str(root)))
    assert r.returncode == 0 and r.stderr == "", r.stderr[-2000:]
    exitcode, mp_dir, python = r.stdout.split()[-3:]
    assert exitcode == "0" and os.path.basename(python).startswith(scratch.PREFIX)
    assert os.path.dirname(mp_dir) == (str(root) if deep else python)
    assert list(root.iterdir()) == []
