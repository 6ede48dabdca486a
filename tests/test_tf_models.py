import numpy as np
import pytest

from bench.models import MODELS

tf_models = pytest.importorskip("bench.models.tf_models")
torch = pytest.importorskip("torch")
from bench.models.torch_models import count_parameters  # noqa: E402

pytestmark = pytest.mark.framework  # builds and trains the models in this process


@pytest.mark.parametrize("name", list(MODELS))
def test_trainable_counts_equal_framework_to_framework(name):
    size = MODELS[name].default_image_size
    tf_count = tf_models.count_trainable(MODELS[name].build_tf(1000, size))
    assert tf_count == count_parameters(MODELS[name].build_torch(1000)) == MODELS[name].params_1000


@pytest.mark.parametrize("n_in", [1, 2, 5, 7, 9, 14])
def test_adaptive_pool_matches_pytorch(n_in):
    x = np.random.default_rng(0).normal(size=(2, n_in, n_in + 1, 3)).astype("float32")
    ours = tf_models.AdaptiveAvgPool2D(7)(tf_models.tf.constant(x)).numpy()
    ref = torch.nn.AdaptiveAvgPool2d(7)(torch.from_numpy(x).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
    np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["vgg16", "resnet50"])
def test_small_images(name):
    model = MODELS[name].build_tf(10, 32)
    assert model(tf_models.tf.zeros((2, 32, 32, 3))).shape == (2, 10)


def test_keras_is_tf_keras():
    # Keras 3 breaks Horovod and multi-worker training; the models must be tf-keras (Keras 2) models.
    model = MODELS["resnet50"].build_tf(10, 32)
    assert type(model).__module__.startswith("tf_keras.")
    assert tf_models.keras.__version__.startswith("2.")
