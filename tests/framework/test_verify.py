"""bench verify: the arithmetic, the weight mapping, bad input, and real runs that PASS and that FAIL."""


from bench.commands.verify import VerifyConfig


def test_pytorch_and_tensorflow_train_vgg16_alike():
    """bench verify's cross-framework check on the default model, VGG-16: both twins from the same weights on the
    same global batch, the loss trajectories within tolerance, and training moved."""
    from bench.commands.verify_cross import cross_framework

    cross = cross_framework(VerifyConfig(model="vgg16", framework="both"))
    assert cross.status == "PASS", cross
    assert len(cross.loss_torch) == len(cross.loss_tf) == 3 and cross.loss_torch[0] != cross.loss_torch[-1]
    assert cross.max_rel_loss <= cross.tolerance
