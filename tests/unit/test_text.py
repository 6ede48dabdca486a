"""The Transformer workload: the same model in both frameworks, token batches, tokens/s in the result."""

import pytest


@pytest.mark.parametrize("args, message", [
    (["torch-ddp", "--model", "transformer-small", "--image-size", "64"], "--image-size applies to image models"),
    (["torch-ddp", "--model", "vgg16", "--seq-len", "64"], "--seq-len applies to text models"),
    (["torch-ddp", "--model", "transformer-small", "--seq-len", "0"], "--seq-len must be an integer >= 1"),
])
def test_inputs_of_the_other_kind_are_one_line(cli, args, message, tmp_path):
    out = cli(*args, "--output", str(tmp_path))
    assert out.returncode == 1
    assert message in out.stderr.strip().splitlines()[-1]
    assert not list(tmp_path.glob("*.json"))
