"""What the TensorFlow modes share: device pinning, precision policy, model, data, replica step, checksum."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.data.feed import Feed
from bench.data.loaders import MEAN, STD
from bench.distributed import tfdist
from bench.errors import BenchError
from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo, check_gpus_per_node, own_gpu_indices
from bench.measure import goal
from bench.models import model as model_spec
from bench.records import env
from bench.tfutil import import_tf
from bench.vocabulary import Device, Precision

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig


tf, keras = import_tf()
CHECKPOINT_DIR = "tf"


def model_input(x):
    """What the model is fed for a step's (or a held-out batch's) input ``x``: the tf loader's uint8 pixels
    normalised with ImageNet's per-channel mean and deviation of 0-255 pixels, ``(x - 255 mean) / (255 std)``, once
    per batch inside the compiled step, so on the device it runs on (the torch trainer's to_device does the same);
    anything else (synthetic batches, DALI's normalised output, token ids) as it is."""
    if x.dtype != tf.uint8:
        return x
    return (tf.cast(x, tf.float32) - tf.constant(MEAN * 255)) / tf.constant(STD * 255)


def pick_device(cfg: RunConfig) -> tuple[str, int]:
    gpus = len(tfdist.gpus())
    device = "cuda" if tfdist.use_gpu(cfg.device) else "cpu"
    if device == "cpu" and cfg.precision == Precision.amp_fp16:
        raise BenchError("--precision amp-fp16 needs a GPU; on CPU use fp32 or amp-bf16")
    return device, gpus


def resolve(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    """One process per device (tf-horovod, tf-native multiworker): like the PyTorch modes."""
    if cfg.is_resolved:
        return cfg
    device, gpus = pick_device(cfg)
    if launch.launcher == "none":
        np = cfg.np or (gpus if device == "cuda" else 2)
        if device == "cuda" and np > gpus:
            raise BenchError(f"--np {np} asks for more ranks than the {gpus} visible GPU(s) on this host")
    else:
        np = launch.world_size
        if cfg.np is not None and cfg.np != np:
            raise BenchError(f"--np {cfg.np} does not match the {np} ranks {launch.launcher} started")
        if device == "cuda":
            check_gpus_per_node(launch, gpus)
    return cfg.resolve(device, np)


def optimizer_variables(opt) -> list:
    v = opt.variables
    return list(v() if callable(v) else v)


def optimizer(keras, cfg):
    """The run's optimizer (``--optimizer``) as PyTorch's modes build it (bench.modes.torch_common): SGD with
    momentum, or Adagrad with its accumulator from 0 and the same eps (Keras's defaults are 0.1 and 1e-7)."""
    if cfg.optimizer == "adagrad":
        return keras.optimizers.Adagrad(learning_rate=cfg.learning_rate, initial_accumulator_value=0.0,
                                        epsilon=goal.ADAGRAD_EPS)
    return keras.optimizers.SGD(learning_rate=cfg.learning_rate, momentum=cfg.momentum)


class DropoutMasks:
    """The masks every Dropout layer of the model draws, keyed rather than drawn from a hidden stream: each is a
    stateless draw seeded by (the rank's stream, the optimizer's step count, the call's place in the step). The
    stream is seed + 1 + rank as in the PyTorch modes (each GPU of a real job draws its own masks); the step count
    is a variable of the optimizer, which a checkpoint holds, so a run resumed from a checkpoint draws the masks the
    run it continues would have drawn, and tf-horovod and tf-native draw the same ones. (Keras's own dropout keeps
    its state inside its kernels, which start afresh in a resumed process; its tf.random.Generator mode changes every
    initial weight and mixes tf.distribute's replica ids into the masks.)

    :meth:`step` takes the step's key while the step is traced; the model's Dropout calls inside it fold their
    order into it."""

    def __init__(self, model) -> None:
        self.layers = [layer for layer in model.submodules if isinstance(layer, keras.layers.Dropout)]
        for layer in self.layers:  # a plain object, not a Trackable: the checkpoint's objects stay as they were
            layer._random_generator = _KeyedGenerator(self)
        self._key = None
        self._calls = 0

    @contextlib.contextmanager
    def step(self, key):
        """The Dropout calls inside: masks of ``key`` (int64 [stream, step]), the i-th call's folded with i."""
        self._key, self._calls = key, 0
        try:
            yield
        finally:
            self._key = None

    def draw(self, inputs, rate, noise_shape=None):
        if self._key is None:
            raise RuntimeError("a Dropout layer drew a mask outside a training step (DropoutMasks.step)")
        seed = tf.random.experimental.stateless_fold_in(self._key, self._calls)
        self._calls += 1
        return tf.nn.experimental.stateless_dropout(inputs, rate, seed, noise_shape=noise_shape)


class _KeyedGenerator:
    """A Dropout layer's generator (Keras's RandomGenerator interface as tf_keras's Dropout calls it)."""
    _rng_type = "legacy_stateful"  # what tf_keras's get_config reads: the layer's config as Keras's own

    def __init__(self, masks: DropoutMasks) -> None:
        self._masks = masks

    def _maybe_init(self) -> None:  # tf_keras calls it when a layer is built
        pass

    def dropout(self, inputs, rate, noise_shape=None):
        return self._masks.draw(inputs, rate, noise_shape)


class TFTrainer:
    """Base for the TensorFlow modes. Subclasses create the strategy (if any) and the compiled step."""
    replicas_per_process = 1
    # --sparse-as-dense: the library densifies the embedding's IndexedSlices itself (Horovod's tape);
    # otherwise the step converts them to a dense tensor before the strategy reduces or the optimizer applies.
    densifies_sparse = False

    def __init__(self, cfg: RunConfig, launch: LaunchInfo, hooks: Hooks | None = None, gpus: str = "one") -> None:
        """``gpus``: 'one' (the local rank's GPU), 'all' (MirroredStrategy) or 'none' (a PS coordinator)."""
        self.cfg = cfg
        self.launch = launch
        self.hooks = hooks = hooks or Hooks()
        self.rank = launch.rank
        self.world_size = launch.world_size
        tfdist.pin(cfg.device == Device.cuda, launch, gpus)
        if cfg.precision != Precision.fp32:
            keras.mixed_precision.set_global_policy(
                "mixed_float16" if cfg.precision == Precision.amp_fp16 else "mixed_bfloat16")
        self.fp16 = cfg.precision == Precision.amp_fp16
        if hooks.deterministic:  # bench verify: deterministic kernels, plain fp32 matmuls
            tf.config.experimental.enable_op_determinism()
            tf.config.experimental.enable_tensor_float_32_execution(False)
        self._last = None
        self.feed = None
        self._losses: list = []

    # -- building blocks (call inside a strategy scope where there is one) -----------------
    def build_model(self):
        keras.utils.set_random_seed(self.cfg.seed)  # identical initial weights on every rank
        self.model = model_spec(self.cfg.model).build_tf(self.cfg.num_classes, self.cfg.image_size, self.cfg.embedding)
        # Dropout's masks keyed by the rank's stream and the step (DropoutMasks); any other random op of the step
        # from the rank's own stream, set before the step is traced.
        self.masks = DropoutMasks(self.model)
        if self.hooks.deterministic:  # bench verify: no random masks that differ between runs
            for layer in self.masks.layers:  # nested layers too (the Transformer's)
                layer.rate = 0.0
        tf.random.set_seed(self.cfg.seed + 1 + self.rank)
        opt = optimizer(keras, self.cfg)
        self.optimizer = keras.mixed_precision.LossScaleOptimizer(opt) if self.fp16 else opt
        # Its slots now, not inside the first step: a tf.function that creates variables is traced twice (measured:
        # ResNet-50's first step 4.8 s with lazily built slots, 2.3 s with these).
        self.optimizer.build(self.model.trainable_variables)
        return self.model

    def make_data(self, index: int):
        """The workload's synthetic inputs and targets for data shard ``index``, generated on the current device."""
        return model_spec(self.cfg.model).workload.tf_batch(tf, self.cfg, index)

    def build_feed(self, x, y, replicas: int = 1) -> None:
        """The step's inputs: the synthetic (x, y), or with --data the rank's feed of the dataset (each step draws
        its batch: :meth:`next_batch`; TensorFlow copies it to the device inside the compiled step). ``replicas``:
        the replicas this process drives (mirrored): its feed reads their batches together, ``replicas`` x the
        batch per step from the process's shard, which the step splits (the same samples per epoch as that many
        ranks' shards: floor(floor(n / R) / b) = floor(n / (R b)))."""
        self._batch = (x, y)
        if self.cfg.data:
            gpus = self.own_gpus() if self.cfg.device == Device.cuda else []
            cfg = self.cfg if replicas == 1 else dataclasses.replace(self.cfg,
                                                                     batch_size=self.cfg.batch_size * replicas)
            self.feed = Feed(cfg, self.rank, self.world_size, self.launch.local_world_size, lambda b: b,
                             copies=False, framework="tensorflow", device_id=gpus[0] if gpus else None)

    def next_batch(self):
        if self.feed is not None:
            self._batch = self.feed.next()
        return self._batch

    def make_global_data(self, shards: int):
        """bench verify's reference batch: data shards 0 .. shards-1 concatenated."""
        parts = [self.make_data(i) for i in range(shards)]
        return tf.concat([x for x, _ in parts], 0), tf.concat([y for _, y in parts], 0)

    def replica_step(self, x, y, loss_divisor, wrap_tape=None, exchange=None):
        """Forward, backward, update on one replica; the loss is summed over examples / loss_divisor
        (the global batch under tf.distribute, which then sums gradients; the local batch under Horovod,
        which averages them). The fault ``skip-allreduce`` makes tf.distribute apply each replica's
        gradients unaggregated. With --xla the forward and backward pass is XLA's (:meth:`gradients` compiled), and
        Horovod's exchange is ``exchange`` (grads -> grads) instead of ``wrap_tape``, which would put its
        allreduce inside the compiled pass, where XLA cannot take it."""
        variables = self.model.trainable_variables
        key = self.mask_key() if self.masks.layers else None
        if self.cfg.xla:
            if getattr(self, "_compiled_gradients", None) is None:
                self._compiled_gradients = tf.function(self.gradients, jit_compile=True)
            loss, grads = self._compiled_gradients(x, y, loss_divisor, key=key)
            if exchange is not None:
                grads = exchange(grads)
        else:
            loss, grads = self.gradients(x, y, loss_divisor, wrap_tape, key)
        if self.hooks.fault == "skip-allreduce":
            self.optimizer.apply_gradients(zip(grads, variables, strict=True), skip_gradients_aggregation=True)
        else:
            self.optimizer.apply_gradients(zip(grads, variables, strict=True))
        return loss

    def mask_stream(self):
        """The replica's dropout stream (DropoutMasks), read inside its step: the rank (one replica a process)."""
        return self.rank

    def mask_key(self):
        """The step's dropout key (DropoutMasks): [seed + 1 + the replica's stream, the optimizer's step count]."""
        stream = tf.cast(self.mask_stream(), tf.int64) + (self.cfg.seed + 1)
        return tf.stack([stream, tf.cast(self.optimizer.iterations, tf.int64)])

    def gradients(self, x, y, loss_divisor, wrap_tape=None, key=None):
        """The replica's loss and unscaled gradients (see :meth:`replica_step`); ``key``: the step's dropout key
        (:meth:`mask_key`; None for a model without dropout). Under XLA an embedding's sparse gradient is made
        dense here (the config check asks for --sparse-as-dense)."""
        from bench.models.tf_loss import per_example_loss

        variables = self.model.trainable_variables
        cfg = self.cfg
        with tf.GradientTape() as tape, self.masks.step(key):
            out = self.model(model_input(x), training=True)
            loss = tf.reduce_sum(per_example_loss(out, y, cfg.label_smoothing)) / loss_divisor
            total = loss
            if cfg.weight_decay:  # L2 in the loss, as PyTorch's SGD adds wd x w to the gradient: the replicas' shares
                share = tf.cast(tf.shape(x)[0], tf.float32) / loss_divisor  # sum (tf.distribute) or average to 1
                total = loss + 0.5 * cfg.weight_decay * share * tf.add_n([tf.reduce_sum(tf.square(v))
                                                                          for v in variables])
            scaled = self.optimizer.get_scaled_loss(total) if self.fp16 else total
        if wrap_tape is not None:
            tape = wrap_tape(tape)
        grads = tape.gradient(scaled, variables)
        if (self.cfg.sparse_as_dense and not self.densifies_sparse) or self.cfg.xla:
            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if self.fp16:
            grads = self.optimizer.get_unscaled_gradients(grads)
        return loss, grads

    def compiled_graphs(self) -> int | None:
        """--xla: the graphs XLA has compiled for the forward and backward pass so far (one per trace of the
        compiled function); None when nothing compiles. The loop reads it around the first step, the warmup steps
        and the timed windows, and the attribution around its timed steps (bench.measure.loop, attribution)."""
        if not self.cfg.xla:
            return None
        compiled = getattr(self, "_compiled_gradients", None)
        return 0 if compiled is None else int(compiled.experimental_get_tracing_count())

    # -- training to a goal (bench.measure.goal) ------------------------------------------------
    def set_learning_rate(self, rate: float) -> None:
        self.optimizer.learning_rate = rate  # the optimizer's rate variable, assigned (not retraced)

    def track(self, loss) -> None:
        """Keep the step's training loss (a tensor: no wait) when the run trains to a goal."""
        if self.cfg.epochs is not None:
            self._losses.append(loss)

    # -- checkpoints (bench.measure.checkpoint) ------------------------------------------------
    def _checkpoint(self):
        return tf.train.Checkpoint(model=self.model, optimizer=self.optimizer)

    def save_state(self, folder) -> None:
        """Every rank writes (tf.distribute's workers must all take part; a rank other than 0 writes to the scratch
        folder it is given): the model's and the optimizer's variables."""
        scope = getattr(self, "strategy", None)
        with scope.scope() if scope is not None else contextlib.nullcontext():
            self._checkpoint().write(str(folder / CHECKPOINT_DIR / "state"))

    def load_state(self, folder) -> None:
        """Every rank reads the checkpoint rank 0 wrote into its model and optimizer (their variables exist: the
        first step made them); the first step's loss, which the checkpoint replaces, is dropped."""
        if not (folder / CHECKPOINT_DIR).is_dir():
            raise BenchError(f"--resume-from {folder}: no {CHECKPOINT_DIR}/ there (not a TensorFlow mode's checkpoint, "
                             "or not on a filesystem this rank reads)")
        scope = getattr(self, "strategy", None)
        with scope.scope() if scope is not None else contextlib.nullcontext():
            self._checkpoint().read(str(folder / CHECKPOINT_DIR / "state")).assert_existing_objects_matched()
        self._losses = []

    def batch_scores(self, x, y):
        """A held-out batch's (top-1 hits, top-5 hits, summed loss, samples), as tensors (bench.measure.goal)."""
        from bench.models.tf_loss import per_example_loss

        out = self.model(model_input(x), training=False)
        out = tf.cast(out[0] if isinstance(out, (list, tuple)) else out, tf.float32)
        if out.shape.rank == 3:  # a text model's (B, L, vocab): next-token accuracy over every target token
            out, y = tf.reshape(out, [-1, out.shape[-1]]), tf.reshape(y, [-1])
        top = tf.math.top_k(out, min(5, out.shape[-1])).indices
        y = tf.cast(y, top.dtype)
        hit = tf.equal(top, y[:, None])
        return (tf.reduce_sum(tf.cast(hit[:, 0], tf.int64)),
                tf.reduce_sum(tf.cast(tf.reduce_any(hit, axis=1), tf.int64)),
                tf.reduce_sum(per_example_loss(out, y)), tf.shape(y)[0])

    def evaluate_shard(self) -> goal.Counts:
        """This rank's counts on its part of the held-out split (bench.measure.goal), and the mean training loss
        of its steps since the last evaluation."""
        if getattr(self, "_eval_step", None) is None:
            self._eval_step = tf.function(self.batch_scores, reduce_retracing=True)
        counts = goal.Counts()
        for x, y in self.feed.held_out():
            c1, c5, loss, n = self._eval_step(x, y)
            counts.samples += int(n)
            counts.correct1 += int(c1)
            counts.correct5 += int(c5)
            counts.loss_sum += float(loss)
        counts.train_loss = self.train_loss()
        return counts

    def train_loss(self) -> float | None:
        """The mean training loss of this rank's steps since the last evaluation (and those forgotten)."""
        losses, self._losses = self._losses, []
        return float(tf.reduce_mean(tf.cast(tf.stack(losses), tf.float32))) if losses else None

    # -- Trainer protocol ------------------------------------------------------------------
    def sync(self) -> None:
        """Wait for the last step: reading its loss completes every op it depends on."""
        if self._last is not None:
            self._last.numpy()

    def _variable_copies(self) -> list[list]:
        """Per local replica, every trainable variable's value (MirroredVariables have one per device)."""
        variables = self.model.trainable_variables
        n = len(getattr(variables[0], "values", [variables[0]]))
        return [[(v.values[i] if hasattr(v, "values") else v).numpy() for v in variables] for i in range(n)]

    def checksum(self) -> str:
        hashes = []
        for copy in self._variable_copies():
            h = hashlib.sha256()
            for value in copy:
                h.update(value.astype("float32").tobytes())
            hashes.append(h.hexdigest())
        return hashes[0] if len(set(hashes)) == 1 else "diverged:" + ",".join(hashes)

    def parameter_arrays(self) -> list[tuple[str, Any]]:
        """Every trainable variable as (name, float32 numpy array), in creation order."""
        return [(v.name, np.asarray(v.numpy(), dtype=np.float32)) for v in self.model.trainable_variables]

    def fingerprint(self) -> float:
        return float(sum(tf.reduce_sum(tf.cast(v, tf.float64)).numpy() for v in self.model.trainable_variables))

    def device_label(self) -> str:
        gpus = tf.config.get_visible_devices("GPU")
        if gpus:
            return ", ".join(g.name for g in gpus)
        threads = tf.config.threading.get_intra_op_parallelism_threads()
        if threads == 0:  # TF's default pool: one thread per CPU this process may run on
            return f"cpu ({len(os.sched_getaffinity(0))} threads, TensorFlow's default)"
        return f"cpu ({threads} threads)"

    def environment(self) -> dict[str, Any]:
        record = env.base()
        record["tensorflow"] = env.tf_info()
        return record

    def sync_report(self) -> dict[str, Any] | None:
        return None

    def attribution_unsupported(self) -> str | None:
        """tf.distribute (tf-native) reduces inside its strategy's step; tf-horovod overrides this."""
        return ("tf.distribute reduces the gradients inside its strategy's step: its compute and its exchange "
                "are not timed apart")

    def own_gpus(self) -> list[int]:
        return own_gpu_indices(self.launch, len(tfdist.gpus()))

    def teardown(self) -> None:
        pass
