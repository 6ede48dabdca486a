"""Sparse embedding gradients (--sparse-embeddings, --sparse-as-dense), the bytes a step moves (bench.measure.traffic)
and bench predict's allgather term."""

import dataclasses

import pytest

from bench.config import RunConfig
from bench.errors import BenchError


def test_untied_models_are_equal_in_both_frameworks_and_add_the_output_projection():
    from bench.models import MODELS
    from bench.models.tf_loss import count_trainable
    from bench.models.tf_transformer import transformer_small as tf_small
    from bench.models.torch_loss import count_parameters
    from bench.models.torch_transformer import transformer_small

    spec = MODELS["transformer-small"]
    for vocab in (1000, 5000):
        untied = spec.parameters(vocab, untied=True)
        assert untied == spec.parameters(vocab) + 64 * vocab  # the output projection: d_model x vocabulary
        for embedding in ("untied", "sparse"):
            assert count_parameters(transformer_small(vocab, embedding)) == untied
            assert count_trainable(tf_small(vocab, embedding=embedding)) == untied


def test_torch_embedding_gradient_is_sparse_and_holds_every_lookup():
    import torch

    from bench.models.torch_loss import loss_fn
    from bench.models.torch_transformer import transformer_small

    torch.manual_seed(0)
    tokens = torch.randperm(1000)[:48].view(2, 3, 8)  # distinct ids: nothing to merge
    grads = {}
    for embedding in ("tied", "untied", "sparse"):
        torch.manual_seed(0)
        model = transformer_small(1000, embedding)
        loss_fn(model(tokens[:, :2]), tokens[:, 2]).backward()
        grads[embedding] = model.embedding.weight.grad
    assert not grads["tied"].is_sparse and not grads["untied"].is_sparse
    sparse = grads["sparse"]
    assert sparse.is_sparse and sparse._nnz() == 2 * 2 * 8  # a row per source and target lookup
    assert sparse._indices().dtype == torch.int64  # bench.measure.traffic's INDEX_BYTES["torch"]
    torch.testing.assert_close(sparse.to_dense(), grads["untied"])  # the same model, the same gradient


def test_tf_embedding_gradient_is_indexed_slices_with_int32_indices():
    from bench.models.tf_loss import per_example_loss
    from bench.models.tf_transformer import transformer_small
    from bench.tfutil import import_tf

    tf, _ = import_tf()
    model = transformer_small(1000, embedding="sparse")
    tokens = tf.random.uniform([2, 3, 8], 0, 1000, tf.int32)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(per_example_loss(model(tokens[:, :2], training=True), tokens[:, 2]))
    grad = tape.gradient(loss, model.embedding.embeddings)
    assert isinstance(grad, tf.IndexedSlices)
    assert grad.indices.dtype == tf.int32 and grad.values.shape == (2 * 2 * 8, 64)  # INDEX_BYTES["tensorflow"]


@pytest.mark.parametrize("device, fp16, message", [
    ("cuda", False, "NCCL has no sparse allreduce"),
    ("cpu", True, "cannot take sparse gradients"),
])
def test_torch_ddp_refuses_what_its_backends_cannot_reduce(device, fp16, message):
    from bench.launching.detect import LaunchInfo
    from bench.modes import torch_ddp

    cfg = RunConfig(mode="torch-ddp", model="transformer-small", sparse_embeddings=True,
                    fp16_allreduce=fp16).resolve(device, 2)
    with pytest.raises(BenchError, match=message):
        torch_ddp.preflight(cfg, LaunchInfo("none"))
    torch_ddp.preflight(dataclasses.replace(cfg, sparse_as_dense=True), LaunchInfo("none"))  # densified: fine
