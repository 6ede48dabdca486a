"""Every rank starts from the same weights and draws its own dropout masks (as each GPU of a real job does), the
same ones on every run; a PyTorch checkpoint gives each rank its own random state back, and a TensorFlow rank's
masks are keyed by its step count, which its checkpoint holds."""

import numpy as np
import pytest
import torch

from bench.config import RunConfig
from bench.launching.detect import LaunchInfo


def config(mode: str):
    return RunConfig(mode=mode, model="transformer-small", batch_size=2, seq_len=8).resolve("cpu", 2)


def launch(rank: int) -> LaunchInfo:
    return LaunchInfo("self", rank=rank, world_size=2, local_rank=rank, local_world_size=2)


def torch_rank(rank: int):
    """(the model's parameters, the mask its first Dropout draws next) as rank ``rank`` of two builds them."""
    from bench.modes.torch_common import TorchTrainer

    trainer = TorchTrainer(config("torch-ddp"), launch(rank))
    model = trainer.build_model()
    dropout = next(m for m in model.modules() if isinstance(m, torch.nn.Dropout) and m.p > 0)
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return trainer, weights, dropout(torch.ones(4096)) != 0


def test_pytorch_ranks_share_weights_and_draw_their_own_masks():
    _, w0, m0 = torch_rank(0)
    _, w1, m1 = torch_rank(1)
    _, w0_again, m0_again = torch_rank(0)
    assert torch.equal(w0, w1)
    assert 0.3 < m0.float().mean() < 0.99 and not torch.equal(m0, m1)
    assert torch.equal(m0, m0_again) and torch.equal(w0, w0_again)


def test_a_pytorch_checkpoint_gives_each_rank_its_own_random_state(tmp_path):
    """Rank 0 of two writes the checkpoint with rank 1's state gathered (as the run's collective gathers it), and
    rank 1 resumes from it: its next masks are those it would have drawn, not rank 0's."""
    def draw():
        return torch.nn.functional.dropout(torch.ones(4096), 0.5) != 0

    rank1, _, _ = torch_rank(1)
    state1 = {"cpu": torch.get_rng_state(), "cuda": None}
    expected = draw()  # rank 1's next draw
    rank0, _, _ = torch_rank(0)
    state0 = torch.get_rng_state()
    for trainer in (rank0, rank1):
        trainer.model = trainer.build_model()
        trainer.optimizer = trainer.build_optimizer(trainer.model.parameters())
    rank0.allgather = lambda mine: [mine, state1]
    torch.set_rng_state(state0)
    rank0.save_state(tmp_path)
    torch.manual_seed(12345)  # another state, which the checkpoint replaces
    rank1.load_state(tmp_path)
    resumed = draw()
    rank0.load_state(tmp_path)
    assert torch.equal(resumed, expected) and not torch.equal(resumed, draw())  # rank 0 drew its own


def tf_rank(rank: int, steps=(0,)):
    """(the model's weights, per step in ``steps`` the masks its first Dropout layer draws when called twice in one
    training step) as rank ``rank`` of two builds them and traces a step that calls it."""
    from bench.modes.tf_common import TFTrainer, tf

    trainer = TFTrainer(config("tf-horovod"), launch(rank))
    model = trainer.build_model()
    dropout = next(layer for layer in trainer.masks.layers if layer.rate > 0)

    @tf.function  # as the training step: traced after the build, keyed by the optimizer's step count
    def draw(x):
        with trainer.masks.step(trainer.mask_key()):
            return dropout(x, training=True), dropout(x, training=True)

    weights = np.concatenate([w.numpy().ravel() for w in model.weights])
    masks = {}
    for step in steps:
        trainer.optimizer.iterations.assign(step)  # where a checkpoint of that step leaves it
        masks[step] = [m.numpy() != 0 for m in draw(tf.ones([4096]))]
    return weights, masks


def test_tensorflow_ranks_share_weights_and_draw_their_own_masks():
    w0, m0 = tf_rank(0, steps=(0, 7))
    w1, m1 = tf_rank(1)
    w0_again, m0_again = tf_rank(0, steps=(7, 0))  # a resumed run: step 7 first, in a new model
    assert np.array_equal(w0, w1) and np.array_equal(w0, w0_again)
    first = m0[0][0]
    assert 0.3 < first.mean() < 0.99 and not np.array_equal(first, m1[0][0])
    # a new mask for each call and each step; the same ones for the same rank and step, whatever came before
    assert not np.array_equal(first, m0[0][1]) and not np.array_equal(first, m0[7][0])
    for step in (0, 7):
        assert all(np.array_equal(a, b) for a, b in zip(m0[step], m0_again[step], strict=True))


def test_a_tensorflow_dropout_mask_outside_a_training_step_is_refused():
    from bench.modes.tf_common import TFTrainer, tf

    trainer = TFTrainer(config("tf-horovod"), launch(0))
    trainer.build_model()
    with pytest.raises(RuntimeError, match="outside a training step"):
        trainer.masks.layers[0](tf.ones([8]), training=True)


@pytest.fixture(autouse=True)
def _keep_global_seeds():
    """Leave the process's random state as it was for the tests after these."""
    state = torch.get_rng_state()
    yield
    torch.set_rng_state(state)
