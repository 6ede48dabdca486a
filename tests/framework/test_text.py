"""The Transformer workload: the same model in both frameworks, token batches, tokens/s in the result."""


def test_both_frameworks_build_the_same_transformer():
    from bench.models import MODELS
    from bench.models.tf_loss import count_trainable
    from bench.models.tf_transformer import transformer_small as tf_small
    from bench.models.torch_loss import count_parameters
    from bench.models.torch_transformer import transformer_base, transformer_small

    spec = MODELS["transformer-small"]
    for vocab in (1000, 5000):
        assert count_parameters(transformer_small(vocab)) == count_trainable(tf_small(vocab)) == spec.parameters(vocab)
    # Transformer-base at the paper's 37000-token shared vocabulary (weights tied to the output)
    assert count_parameters(transformer_base(37000)) == MODELS["transformer-base"].parameters(37000) == 63_082_496
