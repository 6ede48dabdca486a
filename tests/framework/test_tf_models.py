import numpy as np
import pytest

from bench.models import MODELS

tf_layers = pytest.importorskip("bench.models.tf_layers")  # TensorFlow, or the module is skipped
from bench.models import tf_loss, tf_vgg  # noqa: E402

torch = pytest.importorskip("torch")
from bench.models.torch_loss import count_parameters  # noqa: E402


@pytest.mark.parametrize("name", list(MODELS))
def test_trainable_counts_equal_framework_to_framework(name):
    size = MODELS[name].default_image_size
    tf_count = tf_loss.count_trainable(MODELS[name].build_tf(1000, size))
    assert tf_count == count_parameters(MODELS[name].build_torch(1000)) == MODELS[name].params_1000


@pytest.mark.parametrize("n_in", [1, 2, 5, 7, 9, 14])
def test_adaptive_pool_matches_pytorch(n_in):
    x = np.random.default_rng(0).normal(size=(2, n_in, n_in + 1, 3)).astype("float32")
    ours = tf_vgg.AdaptiveAvgPool2D(7)(tf_layers.tf.constant(x)).numpy()
    ref = torch.nn.AdaptiveAvgPool2d(7)(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["vgg16", "resnet50"])
def test_small_images(name):
    model = MODELS[name].build_tf(10, 32)
    assert model(tf_layers.tf.zeros((2, 32, 32, 3))).shape == (2, 10)


def test_keras_is_tf_keras():
    # Keras 3 breaks Horovod and multi-worker training; the models must be tf-keras (Keras 2) models.
    model = MODELS["resnet50"].build_tf(10, 32)
    assert type(model).__module__.startswith("tf_keras.")
    assert tf_layers.keras.__version__.startswith("2.")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_the_transformer_trains_under_mixed_precision(policy):
    """Numbers issue, finding 1: under a mixed policy the float32 positional encoding met a bf16/fp16 tensor
    ("cannot compute AddV2 ... expected bfloat16"), and the causal mask's -1e9 became -inf in fp16, so 0 x -inf
    gave NaN and the loss-scale optimizer would have skipped every update. Forward and backward are finite, and
    a masked position gets no weight."""
    keras = tf_layers.keras
    tf = tf_layers.tf
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = MODELS["transformer-small"].build_tf(100, None)
        tokens = tf.random.stateless_uniform([2, 2, 8], [1, 2], 0, 100, tf.int32)
        with tf.GradientTape() as tape:
            out = model(tokens, training=True)
            loss = tf.reduce_mean(tf.cast(out, tf.float32))
        grads = tape.gradient(loss, model.trainable_variables)
        assert out.dtype == keras.mixed_precision.global_policy().compute_dtype
        assert np.isfinite(out.numpy().astype("float32")).all()
        for g in grads:
            values = g.values if isinstance(g, tf.IndexedSlices) else g
            assert np.isfinite(values.numpy().astype("float32")).all()
        attention = model.decoder[0].self_attn
        x = tf.cast(tf.random.stateless_normal([1, 4, 64], [3, 4]), out.dtype)
        first = attention(x, x, True)[:, 0]  # position 0 sees only itself: later positions must not move it
        moved = tf.concat([x[:, :1], x[:, 1:] + tf.cast(5.0, x.dtype)], axis=1)
        np.testing.assert_allclose(first.numpy().astype("float32"),
                                   attention(moved, moved, True)[:, 0].numpy().astype("float32"), rtol=0, atol=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
