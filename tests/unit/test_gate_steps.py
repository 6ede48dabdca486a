"""tools/benchmarks/gate_steps: a sample is named by the process it is, not by a recipe that mentions it."""

from tools.benchmarks import gate_steps


def test_each_sample_is_named_by_its_own_process_and_the_table_gives_first_last_and_span(tmp_path, capsys):
    log = tmp_path / "steps.log"
    recipe = ("/bin/bash -c rm -rf results/test-times; make --no-print-directory test-system-install || r=1; "
              "make --no-print-directory test-system-cuda")
    log.write_text("\n".join([
        f"1000 {recipe}",  # make test's recipe names the set-up's targets: it is none of them
        "1000 make test",
        "1000 make --no-print-directory test-system-cuda",
        "1060 /usr/bin/docker build --network host -f /w/docker/Dockerfile.cuda --build-arg STACK=current",
        "1120 bash /opt/hvdbench/docker/build-horovod.sh /opt/hvdbench/tf/bin/python",
        "1180 .venv/bin/python -m pytest --junitxml=x.xml -n 2 --dist loadfile -m multiproc tests/multiproc -m "
        "multiproc and not alone",
        "1300 .venv/bin/python -m pytest --junitxml=y.xml -m multiproc and alone tests/multiproc",
        "1300 make --no-print-directory test-system-cuda",
        "not a sample",
    ]) + "\n")
    steps = {command: gate_steps.step_of(command)
             for command in (line.partition(" ")[2] for line in log.read_text().splitlines()[:-1])}
    assert steps[recipe] is None
    assert steps["make test"] == "make test"
    assert steps["bash /opt/hvdbench/docker/build-horovod.sh /opt/hvdbench/tf/bin/python"] == \
        "CUDA image: Horovod compiled for TensorFlow"
    assert [name for command, name in steps.items() if "pytest" in command] == [
        "tier: multiproc", "tier: multiproc (alone)"]
    gate_steps.table(log, start=940)
    rows = {line.split("│")[1].strip(): [cell.strip() for cell in line.split("│")[2:5]]
            for line in capsys.readouterr().out.splitlines() if line.startswith("│")}
    assert rows["system set-up: the CUDA image (make test-system-cuda)"] == ["1.0", "6.0", "5.0"]
    assert rows["tier: multiproc"] == ["4.0", "4.0", "0.0"]
