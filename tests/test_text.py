"""The Transformer workload: the same model in both frameworks, token batches, tokens/s in the result."""

import pytest
from conftest import bench, only_result

SMALL = ["--model", "transformer-small", "--batch-size", "2", "--seq-len", "8", "--warmup-steps", "1",
         "--steps-per-window", "2", "--windows", "2"]


@pytest.mark.framework
def test_both_frameworks_build_the_same_transformer():
    from bench.models import MODELS
    from bench.models.tf_models import count_trainable
    from bench.models.tf_models import transformer_small as tf_small
    from bench.models.torch_models import count_parameters, transformer_base, transformer_small

    spec = MODELS["transformer-small"]
    for vocab in (1000, 5000):
        assert count_parameters(transformer_small(vocab)) == count_trainable(tf_small(vocab)) == spec.parameters(vocab)
    # Transformer-base at the paper's 37000-token shared vocabulary (weights tied to the output)
    assert count_parameters(transformer_base(37000)) == MODELS["transformer-base"].parameters(37000) == 63_082_496


@pytest.mark.multiproc
def test_the_models_listing_names_the_text_models():
    out = bench("models", COLUMNS="200")
    assert out.returncode == 0
    for line in ("transformer-base", "transformer-small"):
        assert line in out.stdout
    assert " text " in out.stdout


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


@pytest.mark.multiproc
@pytest.mark.parametrize("mode", ["torch-ddp", "tf-horovod"])
def test_a_transformer_run_counts_sequences_and_tokens(mode, tmp_path):
    out = bench(mode, *SMALL, "--np", "2", "--output", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "seq/s (rank 0's clock x world)" in out.stderr
    result = only_result(tmp_path)
    s = result["summary"]
    assert result["workload"] == {**result["workload"], "kind": "text", "unit": "sequence", "symbol": "seq/s",
                                  "tokens_per_sample": 8}
    assert s["tokens_per_sec_total"] == pytest.approx(8 * s["samples_per_sec_total"])
    assert s["tokens_per_sec_per_gpu"] == pytest.approx(8 * s["samples_per_sec_per_gpu"])
    assert result["config"]["num_classes"] == 1000 and result["config"]["image_size"] is None  # its own vocabulary
    assert result["sync"]["ranks_in_sync"] and result["sync"]["params_changed"]
