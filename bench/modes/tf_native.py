"""tf-native: TensorFlow's own distribution, ``--strategy multiworker|mirrored|ps``.

* multiworker: MultiWorkerMirroredStrategy, one process per GPU (or per CPU rank); collectives NCCL on
  GPU, RING on CPU. TF_CONFIG is written by the spawner, taken from the environment, or built from
  Slurm (TF's SlurmClusterResolver) under srun.
* mirrored: MirroredStrategy, one process driving every local GPU (on CPU, the one CPU device).
* ps: ParameterServerStrategy, the architecture the Horovod paper compared against: a coordinator
  (the chief, which measures) schedules steps onto workers; variables live on ``--num-ps`` parameter
  servers; workers apply their updates asynchronously. One "step" is one closure per worker.
"""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, Any

from bench.data.feed import WorkerFeeds
from bench.data.loaders import loader
from bench.distributed import tfdist
from bench.errors import BenchError
from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo, parse_tf_config
from bench.launching.supervise import free_port
from bench.launching.supervise import spawn as spawn_processes
from bench.measure import goal
from bench.modes.tf_common import TFTrainer, pick_device, resolve, tf

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig



def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    if cfg.fp16_allreduce:
        raise BenchError("--fp16-allreduce: tf.distribute has no gradient compression; use tf-horovod")
    if cfg.num_ps is not None and (cfg.strategy or "multiworker") != "ps":
        raise BenchError("--num-ps applies to --strategy ps only")
    strategy = cfg.strategy or "multiworker"
    if strategy == "ps" and cfg.data and cfg.loader is not None and not loader(cfg.loader).graph_only:
        raise BenchError(f"--strategy ps reads --data through tf.data on its workers (--loader tf); not "
                         f"--loader {cfg.loader}")
    if strategy == "ps" and launch.launcher == "srun" and "TF_CONFIG" not in os.environ:
        os.environ["TF_CONFIG"] = tfdist.ps_tf_config(launch, cfg.num_ps or 1)  # roles from SLURM_PROCID
    if cfg.is_resolved:
        return cfg
    if strategy == "multiworker":
        return resolve(cfg, launch)
    device, gpus = pick_device(cfg)
    if strategy == "mirrored":
        if launch.launcher not in ("none", "self") and launch.world_size != 1:
            raise BenchError("--strategy mirrored runs one process for all local GPUs; "
                             f"{launch.launcher} started {launch.world_size}")
        replicas = gpus if device == "cuda" else 1
        np_ = cfg.np or replicas
        if np_ > replicas:
            raise BenchError(f"--strategy mirrored drives the local devices: --np {np_} > {replicas} "
                             f"({'GPUs' if device == 'cuda' else 'the one CPU device'})")
        return cfg.resolve(device, np_)
    # ps: --np counts workers
    if launch.launcher == "none":
        np_ = cfg.np or (gpus if device == "cuda" else 2)
        if device == "cuda" and np_ > gpus:
            raise BenchError(f"--np {np_} workers > {gpus} visible GPU(s)")
        num_ps = cfg.num_ps or 1
    else:
        cluster, _, _ = parse_tf_config(_tf_config())
        np_, num_ps = len(cluster.get("worker", [])), len(cluster.get("ps", []))
        if not (np_ and num_ps and cluster.get("chief")):
            raise BenchError("--strategy ps needs TF_CONFIG with 'chief', 'ps' and 'worker' jobs")
        if cfg.np is not None and cfg.np != np_:
            raise BenchError(f"--np {cfg.np} does not match the {np_} workers in TF_CONFIG")
        if cfg.num_ps is not None and cfg.num_ps != num_ps:
            raise BenchError(f"--num-ps {cfg.num_ps} does not match the {num_ps} parameter servers in TF_CONFIG")
    return dataclasses.replace(cfg.resolve(device, np_), num_ps=num_ps)


def _tf_config() -> str:
    text = os.environ.get("TF_CONFIG")
    if not text:
        raise BenchError("tf-native needs TF_CONFIG here (bench writes it when it spawns the processes)")
    return text


def spawn(cfg: RunConfig) -> None:
    """All processes on this host, TF_CONFIG written for each."""
    if cfg.strategy == "mirrored":
        spawn_processes([cfg.mode], [{"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}],
              cfg.to_json())
        return
    if cfg.strategy == "multiworker":
        spawn_processes([cfg.mode], tfdist.multiworker_envs(cfg.np), cfg.to_json())
        return
    roles = [("chief", 0)] + [("worker", i) for i in range(cfg.np)] + [("ps", i) for i in range(cfg.num_ps)]
    cluster: dict[str, list[str]] = {}
    for role, _ in roles:
        cluster.setdefault(role, []).append(f"127.0.0.1:{free_port()}")
    envs = []
    for rank, (role, index) in enumerate(roles):
        env = {"RANK": str(rank), "WORLD_SIZE": str(len(roles)), "LOCAL_WORLD_SIZE": str(len(roles)),
               "LOCAL_RANK": str(index if role == "worker" else 0),
               "TF_CONFIG": tfdist.task_config(cluster, role, index)}
        if role == "ps":
            env["CUDA_VISIBLE_DEVICES"] = ""  # parameter servers keep to the CPU (the chief hides GPUs from TF)
        envs.append(env)
    spawn_processes([cfg.mode], envs, cfg.to_json(), servers=frozenset(range(1, len(roles))))


def serve(cfg: RunConfig, launch: LaunchInfo) -> bool:
    """Under --strategy ps, workers and parameter servers serve until stopped; True if this process did."""
    if cfg.strategy != "ps":
        return False
    cluster, task_type, index = parse_tf_config(_tf_config())
    if task_type == "chief":
        return False
    if task_type not in ("worker", "ps"):
        raise BenchError(f"--strategy ps has no role for TF_CONFIG task type '{task_type}'")
    gpus = tfdist.gpus()
    tf.config.set_visible_devices([gpus[index % len(gpus)]] if task_type == "worker" and gpus and
                                  cfg.device.value == "cuda" else [], "GPU")
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name=task_type, task_index=index,
                                  protocol="grpc", start=True)
    serve_while_chief(server, cluster["chief"][0], cfg.rendezvous_timeout)
    return True


def serve_while_chief(server, chief: str, timeout_s: float, poll_s: float = 1.0, misses: int = 3) -> None:
    """Serve until the chief has come and gone: its gRPC port, open while it coordinates, is polled.

    A TensorFlow server has no way to be told to stop, and under srun or a user's own launcher nobody kills
    it (bench's spawner does): without this the step would never end once the chief has written its result.
    ``misses`` failed connections in a row after it was seen mean it is gone; never seen within ``timeout_s``
    (--rendezvous-timeout) is an error naming it.
    """
    import socket
    import time

    host, _, port = chief.rpartition(":")
    started, seen, missed = time.monotonic(), False, 0
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=poll_s * 2).close()
            seen, missed = True, 0
        except OSError:
            missed += 1
            if seen and missed >= misses:
                break
            if not seen and time.monotonic() - started > timeout_s:
                raise BenchError(f"the chief at {chief} did not start within {timeout_s:g} s "
                                 "(--rendezvous-timeout)") from None
        time.sleep(poll_s)
    del server  # the chief has written its result; this process ends with it


def make_trainer(cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> TFTrainer:
    return {"multiworker": MultiWorkerTrainer, "mirrored": MirroredTrainer,
            "ps": ParameterServerTrainer}[cfg.strategy](cfg, launch, hooks)


class _SyncStrategyTrainer(TFTrainer):
    """Synchronous strategies (multiworker, mirrored): one compiled step over every replica."""

    def build_step(self, shard) -> None:
        strategy = self.strategy
        with strategy.scope():
            self.build_model()
        global_batch = self.cfg.batch_size * strategy.num_replicas_in_sync
        if self.cfg.data:  # each replica takes its slice of the batch this process's feed reads
            replicas = self.replicas_per_process  # multiworker: 1 per worker; mirrored: every local device
            self.build_feed(None, None, replicas)
            size = self.cfg.batch_size

            def split(batch):
                if replicas == 1:
                    return batch
                return tuple(strategy.experimental_distribute_values_from_function(
                    lambda ctx, t=t: t[ctx.replica_id_in_sync_group * size:(ctx.replica_id_in_sync_group + 1) * size])
                    for t in batch)

            @tf.function
            def fed_step(x, y):
                per_replica = strategy.run(lambda x, y: self.replica_step(x, y, global_batch), args=(x, y))
                return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

            self._train_step = lambda: fed_step(*split(self.next_batch()))
            return
        xs = strategy.experimental_distribute_values_from_function(lambda ctx: self.make_data(shard(ctx))[0])
        ys = strategy.experimental_distribute_values_from_function(lambda ctx: self.make_data(shard(ctx))[1])

        @tf.function
        def train_step():
            per_replica = strategy.run(lambda x, y: self.replica_step(x, y, global_batch), args=(xs, ys))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        self._train_step = train_step

    def step(self) -> None:
        self._last = self._train_step()
        self.track(self._last)

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["distribution"] = {"library": "tf.distribute", "strategy": type(self.strategy).__name__,
                                  "replicas_in_sync": self.strategy.num_replicas_in_sync,
                                  "collectives": getattr(self, "collectives", None)}
        return record


class MultiWorkerTrainer(_SyncStrategyTrainer):
    def setup(self) -> None:
        self.strategy, self.collectives = tfdist.multiworker(self.launch, self.cfg.device.value == "cuda",
                                                             self.cfg.rendezvous_timeout)
        self.build_step(lambda ctx: self.rank)

    def allgather(self, obj: Any) -> list[Any]:
        return tfdist.allgather(self.strategy, obj)


class MirroredTrainer(_SyncStrategyTrainer):
    def __init__(self, cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> None:
        super().__init__(cfg, launch, hooks, gpus="all")

    def setup(self) -> None:
        gpu = self.cfg.device.value == "cuda"
        devices = [f"/gpu:{i}" for i in range(self.cfg.np)] if gpu else ["/cpu:0"]
        self.strategy = tf.distribute.MirroredStrategy(devices=devices)
        self.replicas_per_process = self.strategy.num_replicas_in_sync
        self.build_step(lambda ctx: ctx.replica_id_in_sync_group)

    def mask_stream(self):
        """Each local replica draws its own dropout masks: its id among the replicas."""
        return tf.distribute.get_replica_context().replica_id_in_sync_group

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]

    def own_gpus(self) -> list[int]:
        return list(range(self.cfg.np))


class ParameterServerTrainer(TFTrainer):
    def __init__(self, cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> None:
        super().__init__(cfg, launch, hooks, gpus="none")

    def setup(self) -> None:
        self.resolver = resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        workers = resolver.cluster_spec().num_tasks("worker")
        self.replicas_per_process = workers
        self.measuring_processes = 1  # the coordinator measures for every worker; ps and workers only serve
        self.strategy = strategy = tf.distribute.ParameterServerStrategy(resolver)
        self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        with strategy.scope():
            self.build_model()
            self.updates = tf.Variable(tf.zeros([workers], tf.int64), trainable=False)
        # --data: each worker reads its own shard, through a pipeline built on it (bench.data.feed.WorkerFeeds)
        self.feed = WorkerFeeds(self.cfg, workers, reopen=self._open_workers) if self.cfg.data else None
        self._open_workers()
        fed = self.feed is not None

        @tf.function
        def worker_fn(iterator):
            def replica_fn(x, y):
                loss = self.replica_step(x, y, self.cfg.batch_size)
                worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                self.updates.assign_add(tf.one_hot(worker, workers, dtype=tf.int64))
                return loss

            if not fed:
                x, y = next(iterator)
                return strategy.run(replica_fn, args=(x, y))
            asked = tf.timestamp()  # the closure's wait for its batch, read on the worker
            with tf.control_dependencies([asked]):
                x, y = next(iterator)
            with tf.control_dependencies([x, y]):
                held = tf.timestamp()
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            return strategy.run(replica_fn, args=(x, y)), held - asked, worker

        self._worker_fn = worker_fn
        self._pending: list = []  # --data: each closure's (loss, wait, worker), fetched at the next sync
        self.scheduled = 0
        self._score_part = None  # --epochs: the closure that scores one part of the held-out split
        self.scored_by = [0] * workers  # the parts each worker scored

    def mask_stream(self):
        """Each worker draws its own dropout masks: the worker's index, read where the step runs."""
        return tf.distribute.coordinator.experimental_get_current_worker_index()

    def _open_workers(self) -> None:
        """Each worker's iterator: the synthetic batch made once and cached there, or (--data) its shard of the
        dataset from where the feed begins (a resumed run: past the batches already trained on)."""
        if self.feed is None:
            def dataset_fn():
                return tf.data.Dataset.range(1).map(lambda _: self.make_data(0)).cache().repeat()
        else:
            cfg, feed = self.cfg, self.feed
            epoch, skip = feed.start

            def dataset_fn():  # traced here, run on every worker: no Python inside (graph_only)
                worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                return feed.loader.dataset(feed.dataset, "train", cfg.image_size, cfg.batch_size, feed.workers,
                                           cfg.seed, worker, feed.world, epoch, None, graph_only=True).skip(skip)
        self.iterator = iter(self.coordinator.create_per_worker_dataset(dataset_fn))

    def step(self) -> None:
        for _ in range(self.replicas_per_process):
            done = self.coordinator.schedule(self._worker_fn, args=(self.iterator,))
            if self.feed is not None:
                self._pending.append(done)
        self.scheduled += self.replicas_per_process

    def sync(self) -> None:
        self.coordinator.join()
        if self._pending:
            fetched, self._pending = self.coordinator.fetch(self._pending), []
            for loss, wait, worker in fetched:
                self.feed.add(int(worker), float(wait))
                if self.cfg.epochs is not None:
                    self._losses.append(float(loss))

    def evaluate_shard(self) -> goal.Counts:
        """The held-out split scored by the workers, never here: the coordinator has no GPU, and with the variables
        on the parameter servers its own forward passes would fetch every weight for each batch. The split is cut
        into one part per worker (sample i in part i mod W, bench.data.loaders.TFLoader.dataset) and each part is a
        closure that builds its part's pipeline where it runs and sums its hits; whichever worker runs which part,
        every sample is scored once. The coordinator adds the parts' counts."""
        workers = self.replicas_per_process
        if self._score_part is None:
            cfg, feed, strategy = self.cfg, self.feed, self.strategy

            @tf.function
            def score_part(part):
                def replica_fn(part):
                    held_out = feed.loader.dataset(feed.dataset, "val", cfg.image_size, cfg.batch_size, feed.workers,
                                                   cfg.seed, part, workers, 0, None, graph_only=True)
                    sums = tf.zeros([4], tf.float64)
                    for x, y in held_out:
                        sums += tf.stack([tf.cast(v, tf.float64) for v in self.batch_scores(x, y)])
                    return sums

                worker = tf.distribute.coordinator.experimental_get_current_worker_index()
                return strategy.run(replica_fn, args=(part,)), worker

            self._score_part = score_part
        parts = [self.coordinator.schedule(self._score_part, args=(tf.constant(k, tf.int64),))
                 for k in range(workers)]
        self.coordinator.join()
        counts = goal.Counts()
        for remote in parts:
            sums, worker = remote.fetch()
            correct1, correct5, loss_sum, samples = (float(v) for v in sums)
            counts.correct1 += round(correct1)
            counts.correct5 += round(correct5)
            counts.loss_sum += loss_sum
            counts.samples += round(samples)
            self.scored_by[int(worker)] += 1
        counts.train_loss = self.train_loss()
        return counts

    def allgather(self, obj: Any) -> list[Any]:
        return [obj]  # the coordinator is the one measuring process

    def own_gpus(self) -> list[int]:
        return list(range(min(self.replicas_per_process, len(tfdist.gpus()))))  # the workers' GPUs

    def _variable_copies(self) -> list[list]:
        return [[v.numpy() for v in self.model.trainable_variables]]

    def sync_report(self) -> dict[str, Any]:
        counts = [int(c) for c in self.updates.numpy()]
        on_ps = all("/job:ps" in v.device for v in self.model.variables)
        return {
            "strategy": "ps",
            "variables_on_ps": on_ps,
            "variable_devices": sorted({v.device for v in self.model.variables}),
            "updates_per_worker": counts,
            "closures_run": self.scheduled,
            "optimizer_iterations": int(self.optimizer.iterations.numpy()),
            "held_out_parts_per_worker": self.scored_by,  # --epochs: the parts of the held-out split each scored
            "in_sync": on_ps and all(c > 0 for c in counts) and sum(counts) == self.scheduled,
            "definition": "variables on the parameter servers, and every worker's updates applied there",
        }

    def environment(self) -> dict[str, Any]:
        record = super().environment()
        record["distribution"] = {"library": "tf.distribute", "strategy": "ParameterServerStrategy",
                                  "workers": self.replicas_per_process, "num_ps": self.cfg.num_ps,
                                  "tasks": self.tasks()}
        return record

    def tasks(self) -> list[dict[str, Any]]:
        """Every task of the cluster (the chief, each ps and worker): its address and the devices the chief sees
        it offer. Only the chief measures, so this is where the other tasks' hosts are recorded."""
        devices = [d.name for d in tf.config.list_logical_devices()]
        spec = self.resolver.cluster_spec().as_dict()
        return [{"job": job, "index": i, "host": address.rpartition(":")[0], "address": address,
                 "devices": sorted(d.rsplit("/device:", 1)[1] for d in devices
                                   if d.startswith(f"/job:{job}/replica:0/task:{i}/device:"))}
                for job in sorted(spec) for i, address in enumerate(spec[job])]
