"""Import TensorFlow the way every TF mode needs it: tf-keras (Keras 2), quiet logs.

Keras 3 (TF >= 2.16's default) breaks Horovod (DistributedGradientTape fails on Keras-3 variables;
the Keras DistributedOptimizer silently skips averaging) and MultiWorkerMirroredStrategy training.
tf-keras, selected by TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, works with both.
"""

from __future__ import annotations

import os

from bench.errors import BenchError


def import_tf():
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        import tensorflow as tf
        import tf_keras
    except ImportError as exc:
        raise BenchError(f"TensorFlow modes need tensorflow and tf-keras ({exc}); run 'make venv'") from None
    return tf, tf_keras
