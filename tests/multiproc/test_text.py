"""The Transformer workload: the same model in both frameworks, token batches, tokens/s in the result."""

import pytest

from tests.conftest import bench, only_result

SMALL = ["--model", "transformer-small", "--batch-size", "2", "--seq-len", "8", "--warmup-steps", "1",
         "--steps-per-window", "2", "--windows", "2"]


def test_the_models_listing_names_the_text_models():
    out = bench("models", COLUMNS="200")
    assert out.returncode == 0
    for line in ("transformer-base", "transformer-small"):
        assert line in out.stdout
    assert " text " in out.stdout


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
