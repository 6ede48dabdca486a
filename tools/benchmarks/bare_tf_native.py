"""A bare tf.distribute loop: the reference bench tf-native (multiworker) is compared against.

TensorFlow's documented custom-training-loop pattern for MultiWorkerMirroredStrategy (strategy.run in a
tf.function, loss summed over the global batch, RING collectives on CPU) with this project's model
definition, SGD(0.01, momentum 0.9) and a fixed synthetic batch; none of bench's harness. Each worker
is started with its TF_CONFIG (tools/benchmarks/overhead.py writes them, as the spawner does):

    TF_CONFIG='{"cluster": {"worker": [...]}, "task": {"type": "worker", "index": 0}}' \
        python -m tools.benchmarks.bare_tf_native --model vgg16 --image-size 32 ...

Every worker prints one JSON line with its timed seconds; total images/s = world * batch * steps / the
slowest worker's time.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from bench.models import model as model_spec  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()

    impl = tf.distribute.experimental.CommunicationImplementation.RING
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(implementation=impl))
    world = strategy.num_replicas_in_sync
    with strategy.scope():
        keras.utils.set_random_seed(42)
        model = model_spec(a.model).build_tf(a.num_classes, a.image_size)
        opt = keras.optimizers.SGD(0.01, momentum=0.9)
    data = tf.random.normal([a.batch_size, a.image_size, a.image_size, 3])
    target = tf.random.uniform([a.batch_size], maxval=a.num_classes, dtype=tf.int32)

    def replica_step():
        with tf.GradientTape() as tape:
            per_example = keras.losses.sparse_categorical_crossentropy(target, model(data, training=True),
                                                                       from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=a.batch_size * world)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def step():
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step), axis=None)

    for _ in range(1 + a.warmup_steps):
        loss = step()
    loss.numpy()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.numpy()
    elapsed = time.perf_counter() - t0
    print(json.dumps({"worker_seconds": elapsed, "world": world, "images": world * a.batch_size * a.steps}),
          flush=True)


if __name__ == "__main__":
    main()
