"""Import TensorFlow the way every TF mode needs it: tf-keras (Keras 2), quiet start-up.

Keras 3 (TF >= 2.16's default) breaks Horovod (DistributedGradientTape fails on Keras-3 variables;
the Keras DistributedOptimizer silently skips averaging) and MultiWorkerMirroredStrategy training.
tf-keras, selected by TF_USE_LEGACY_KERAS=1 before TensorFlow is imported, works with both.
TensorFlow < 2.16 (the 'classic' image stack) ships Keras 2 as tf.keras and needs no tf-keras.

TensorFlow's C++ start-up writes straight to file descriptor 2, whatever TF_CPP_MIN_LOG_LEVEL says: absl's
"All log messages before absl::InitializeLog()", oneDNN's notice, the CPU-feature note and, in the CUDA image
without a GPU, "failed call to cuInit". :func:`quiet_startup` drops those lines (they match
:data:`STARTUP_CHATTER`) while TensorFlow and Horovod's TensorFlow part load and look for GPUs, and passes every
other line through as it comes; HVDBENCH_VERBOSE=1 shows everything.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from bench import scratch
from bench.errors import BenchError

VERBOSE_ENV = "HVDBENCH_VERBOSE"
STARTUP_CHATTER = re.compile(
    rb"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    rb"|[IW]\d{4} \d\d:\d\d:[\d.]+ +\d+ \S+:\d+\] "  # absl INFO and WARNING lines
    rb"|E\d{4} .*(failed call to cuInit|Unable to register cu\w+ factory)"
    rb"|To enable the following instructions: .* rebuild TensorFlow)")


@contextmanager
def quiet_startup() -> Iterator[None]:
    """While the block runs, file descriptor 2 goes through a filter that drops TensorFlow's start-up chatter
    and forwards every other line at once (a crash's last words included)."""
    if os.environ.get(VERBOSE_ENV, "") not in ("", "0"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()

    def forward() -> None:
        pending = b""
        with os.fdopen(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                kept = [line + b"\n" for line in lines if not STARTUP_CHATTER.match(line)]
                if kept:
                    os.write(saved, b"".join(kept))
        if pending and not STARTUP_CHATTER.match(pending):
            os.write(saved, pending)

    thread = threading.Thread(target=forward, name="hvdbench-quiet-startup", daemon=True)
    thread.start()
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # the pipe's last writer closes: the thread reads to the end and stops
        thread.join(timeout=5)
        os.close(saved)


def import_tf():
    if "tensorflow" in sys.modules:
        import tensorflow as tf
    else:
        scratch.use_for_python()  # autograph's files, removed only by an exit handler (bench.scratch)
        os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        try:
            with quiet_startup():
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
