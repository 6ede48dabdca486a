"""A bare Horovod TensorFlow loop: the reference bench tf-horovod is compared against.

Horovod's tensorflow2_synthetic_benchmark.py logic (DistributedGradientTape, broadcast after the first
step) with this project's model definition, SGD(0.01, momentum 0.9) and a fixed synthetic batch;
none of bench's harness. Started by horovodrun:

    horovodrun -np 2 --gloo python -m tools.benchmarks.bare_tf_horovod --model vgg16 --image-size 32 ...

Prints one JSON line on rank 0: total images/s = world * batch * steps / slowest rank's time.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import horovod.tensorflow as hvd  # noqa: E402
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

    hvd.init()
    threads = max(1, (os.cpu_count() or 1) // hvd.local_size())
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    keras.utils.set_random_seed(42)
    model = model_spec(a.model).build_tf(a.num_classes, a.image_size)
    opt = keras.optimizers.SGD(0.01, momentum=0.9)
    data = tf.random.normal([a.batch_size, a.image_size, a.image_size, 3])
    target = tf.random.uniform([a.batch_size], maxval=a.num_classes, dtype=tf.int32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(target, model(data, training=True),
                                                                              from_logits=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    step().numpy()
    hvd.broadcast_variables(model.variables, root_rank=0)
    hvd.broadcast_variables(opt.variables, root_rank=0)
    for _ in range(a.warmup_steps):
        loss = step()
    loss.numpy()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss.numpy()
    elapsed = hvd.allreduce(tf.constant(time.perf_counter() - t0), op=hvd.Max).numpy()
    if hvd.rank() == 0:
        print(json.dumps({"samples_per_sec_total": hvd.size() * a.batch_size * a.steps / float(elapsed)}))


if __name__ == "__main__":
    main()
