import pytest

torch = pytest.importorskip("torch")

from bench.models import MODELS  # noqa: E402
from bench.models.torch_models import count_parameters, loss_fn  # noqa: E402

pytestmark = pytest.mark.framework  # builds and trains the models in this process


def build(name, num_classes=1000):
    return MODELS[name].build_torch(num_classes)


@pytest.mark.parametrize("name", list(MODELS))
def test_parameter_counts_match_torchvision(name):
    assert count_parameters(build(name, 1000)) == MODELS[name].params_1000


@pytest.mark.parametrize("name", list(MODELS))
def test_parameter_count_at_other_class_counts(name):
    """The registry's head widths give the count at any class count (bench predict's gradient size)."""
    assert count_parameters(build(name, 10)) == MODELS[name].parameters(10)


def test_vgg16_without_batch_norm_has_13_conv_and_3_fc():
    m = build("vgg16")
    assert sum(isinstance(x, torch.nn.Conv2d) for x in m.modules()) == 13
    assert sum(isinstance(x, torch.nn.Linear) for x in m.modules()) == 3
    assert not any(isinstance(x, torch.nn.BatchNorm2d) for x in m.modules())


@pytest.mark.parametrize("name", ["vgg16", "resnet50"])
@pytest.mark.parametrize("size", [32, 48])
def test_small_images_work(name, size):
    out = build(name, 10)(torch.randn(2, 3, size, size))
    assert out.shape == (2, 10)


def test_inception_trains_with_aux_head_at_299():
    m = build("inception3", 10).train()
    out = m(torch.randn(2, 3, 299, 299))
    assert isinstance(out, tuple) and out[0].shape == out[1].shape == (2, 10)
    loss_fn(out, torch.tensor([1, 2])).backward()
