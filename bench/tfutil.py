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
