"""Import TensorFlow the way every TF mode needs it: tf-keras (Keras 2), quiet logs.

Keras 3 (TF >= 2.16's default) breaks Horovod (DistributedGradientTape fails on Keras-3 variables;
the Keras DistributedOptimizer silently skips averaging) and MultiWorkerMirroredStrategy training.
tf-keras, selected by TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, works with both.
TensorFlow < 2.16 (the 'classic' image stack) ships Keras 2 as tf.keras and needs no tf-keras.
"""

from __future__ import annotations

import os

from bench.errors import BenchError


def import_tf():
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
    except ImportError as exc:
        raise BenchError(f"TensorFlow modes need tensorflow ({exc}); pip install '.[tf]' in the hvdbench "
                         "checkout, or 'make venv'") from None
    try:
        import tf_keras as keras
    except ImportError:
        keras = tf.keras
        if not str(getattr(keras, "__version__", "3")).startswith("2."):
            raise BenchError(f"TensorFlow {tf.__version__} brings Keras 3, which breaks Horovod and multi-worker "
                             f"training: pip install --no-deps tf-keras=={tf.__version__}") from None
    return tf, keras


def set_cpu_threads(tf) -> None:
    """TensorFlow's intra-op pool on CPU: the user's OMP_NUM_THREADS when they set one, else TF's default
    (every core), also when the spawner gave each rank a core share for PyTorch's sake.

    This is what a plain TF script gets, Horovod's own tensorflow2_synthetic_benchmark.py among them, and
    several ranks' default pools share the cores without harm: TF's Eigen pool blocks rather than spins.
    Measured here (2 cores, VGG-16 224x224, tf-horovod at 2 ranks): with one thread per rank bench ran
    behind that script at batch 4 (0.756 vs 0.794 img/s per rank); with the default pool at 0.779 vs 0.770;
    at batch 2 the two pools measured alike within this machine's noise. PyTorch's OpenMP threads spin
    instead, and one share per rank is far faster there (bench.modes.torch_common; docs/measuring.md, "Against
    Horovod's own scripts").
    """
    from bench.launch import THREAD_SHARE_ENV

    value = os.environ.get("OMP_NUM_THREADS")
    if value and os.environ.get(THREAD_SHARE_ENV) != value:
        try:
            tf.config.threading.set_intra_op_parallelism_threads(max(1, int(value)))
        except ValueError:
            raise BenchError(f"OMP_NUM_THREADS={value!r} is not a number of threads") from None


def multiworker_strategy(tf, resolver, options, rank: int, timeout_s: float):
    """MultiWorkerMirroredStrategy, its rendezvous bounded by ``timeout_s``, SIGTERM ending the process again.

    The strategy's creation waits, inside TensorFlow's C++ code and holding the GIL, for every worker of the
    cluster; a worker that never comes makes it wait forever, so bench.watchdog.deadline ends the process
    after ``timeout_s`` (``--rendezvous-timeout``) with one line naming the cluster. Creating the strategy
    also starts TensorFlow's coordination service, whose preemption notifier catches SIGTERM (to let a
    training loop checkpoint). bench has no checkpoint to save, and a caught SIGTERM kept each worker alive
    until its spawner's SIGKILL 10 s later, or until Slurm's KillWait after scancel: the default action is
    restored once the strategy exists, so a worker ends at once; its peers' collectives then fail.
    """
    import signal

    from bench.watchdog import deadline

    spec = resolver.cluster_spec().as_dict()
    workers = ", ".join(spec.get("chief", []) + spec.get("worker", []))
    with deadline(timeout_s, f"tf.distribute rendezvous of the workers ({workers}) did not complete within "
                             f"{timeout_s:g} s (--rendezvous-timeout): a worker did not start, or cannot be reached "
                             "at its address", rank):
        strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=resolver, communication_options=options)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    return strategy
