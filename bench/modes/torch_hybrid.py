"""torch-hybrid: Parallax's hybrid on TorchRec. The token embedding is sharded row-wise over the ranks (every rank
serves a contiguous block of rows: lookups go to their owners and the rows come back by all-to-all, and in the
backward pass the rows' gradients go back to their owners, which apply them), every other parameter is
data-parallel under DDP (ring allreduce), and both happen in one synchronous step.

TorchRec's DistributedModelParallel does both: it shards the EmbeddingCollection as the plan says (row-wise,
asked of its planner) and wraps the rest of the model in DDP. The table's rows are trained by TorchRec's fused
optimizer inside the backward pass (exact SGD, the run's learning rate: fused kernels have no momentum; or with
``--optimizer adagrad`` fbgemm's exact Adagrad, the dense part's arithmetic); the dense part by the run's
optimizer. The model is the untied Transformer of ``--sparse-embeddings``
(the shared output projection would make the table's gradient dense); the mode implies it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import math
import warnings
from typing import TYPE_CHECKING, Any

import torch

from bench.distributed import torchdist
from bench.errors import BenchError, MissingDependency
from bench.hooks import Hooks
from bench.launching.detect import LaunchInfo
from bench.launching.supervise import spawn_local
from bench.measure import goal
from bench.models import model as model_spec
from bench.models.torch_loss import loss_fn
from bench.modes.torch_common import TorchTrainer, resolve, score
from bench.vocabulary import Precision

if TYPE_CHECKING:  # the run configuration imports the mode registry to check a run
    from bench.config import RunConfig

TABLE = "tokens"
FEATURES = ("source", "target")  # both halves of a sample read the one table
INSTALL = ("TorchRec is installed by make venv; elsewhere: pip install -r requirements/hybrid.txt, then "
           "pip install --no-deps torchrec==1.8.0 (its metadata asks for the CUDA fbgemm-gpu)")


def torchrec():
    """TorchRec's parts this mode uses, or one clear line without it."""
    try:
        with quiet():
            import torchrec as trec
            from torchrec.distributed import DistributedModelParallel
            from torchrec.distributed.embedding import EmbeddingCollectionSharder
            from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
            from torchrec.distributed.planner.types import ParameterConstraints
            from torchrec.distributed.types import ShardingType
            from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
            from torchrec.optim.optimizers import in_backward_optimizer_filter
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
    except (ImportError, OSError) as exc:  # OSError: fbgemm's operators built against another torch
        raise MissingDependency(f"torch-hybrid needs TorchRec ({exc}). {INSTALL}") from None
    return dataclasses.make_dataclass("TorchRec", ["module", "dmp", "sharder", "planner", "topology",
                                                   "constraints", "row_wise", "in_backward", "dense_filter",
                                                   "kjt"])(
        trec, DistributedModelParallel, EmbeddingCollectionSharder, EmbeddingShardingPlanner, Topology,
        ParameterConstraints, ShardingType.ROW_WISE.value, apply_optimizer_in_backward,
        in_backward_optimizer_filter, KeyedJaggedTensor)


@contextlib.contextmanager
def quiet():
    """TorchRec's set-up warnings (its planner's advice for production topologies, deprecations) kept off the
    terminal: bench's own lines come first."""
    loggers = [logging.getLogger("torchrec")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", UserWarning)
            yield
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)


def preflight(cfg: RunConfig, launch: LaunchInfo) -> RunConfig:
    spec = model_spec(cfg.model)
    if not spec.sparse_embeddings:
        raise BenchError(f"torch-hybrid shards a token embedding over the ranks: it trains the text models "
                         f"(transformer-small, transformer-base); {cfg.model} has no token embedding")
    if cfg.sparse_as_dense:
        raise BenchError("torch-hybrid: --sparse-as-dense would reduce the embedding densely on every rank; the "
                         "hybrid shards it instead (drop --sparse-as-dense, or use torch-ddp for that)")
    if cfg.precision != Precision.fp32:
        raise BenchError("torch-hybrid runs fp32 (TorchRec's fused table kernels here are fp32); drop --precision")
    if cfg.compile not in (None, "none"):
        raise BenchError("torch-hybrid runs eager: TorchRec traces its sharded model with torch.fx, which a compiled "
                         "module does not pass through; drop --compile (--tuned leaves it out here)")
    torchrec()  # a missing TorchRec is one line here, in the parent, before any rank starts
    return resolve(dataclasses.replace(cfg, sparse_embeddings=True, compile="none"), launch)


def spawn(cfg: RunConfig) -> None:
    spawn_local([cfg.mode], cfg.np, cfg.to_json())


def make_trainer(cfg: RunConfig, launch: LaunchInfo, hooks: Hooks) -> HybridTrainer:
    return HybridTrainer(cfg, launch, hooks)


class HybridTransformer(torch.nn.Module):
    """The Transformer after its lookup: ``tokens`` (an EmbeddingCollection, sharded by DMP) gives the rows of
    the source and the target, ``net`` (the untied Transformer without its embedding) the logits."""

    def __init__(self, tokens: torch.nn.Module, net: torch.nn.Module, d_model: int) -> None:
        super().__init__()
        self.tokens, self.net, self.d_model = tokens, net, d_model

    def forward(self, features, batch: int, length: int) -> torch.Tensor:
        rows = self.tokens(features)
        source, target = (rows[f].values().view(batch, length, self.d_model) for f in FEATURES)
        return self.net.from_vectors(source, target)


class HybridTrainer(TorchTrainer):
    # Every rank holds a different block of the table: a snapshot or a checksum gathers it from all ranks.
    gathers_parameters = True

    def setup(self) -> None:
        cfg = self.cfg
        trec = torchrec()
        # TorchRec traces the model with torch.fx at its first step, and torch warns about it on every rank.
        logging.getLogger("torch.fx._symbolic_trace").setLevel(logging.ERROR)
        self.backend = torchdist.init_group(self.launch, self.device, cfg.rendezvous_timeout)
        net = self.build_model()  # seeded: the same untied model, table included, on every rank
        table = net.embedding.weight.detach().clone()
        vocab, d_model = table.shape
        net.embedding = None  # the table lives in the sharded collection from here on
        with quiet():
            tokens = trec.module.EmbeddingCollection(
                tables=[trec.module.EmbeddingConfig(name=TABLE, embedding_dim=d_model, num_embeddings=vocab,
                                                    feature_names=list(FEATURES))],
                device=torch.device("meta"))
            if cfg.optimizer == "adagrad":
                trec.in_backward(torch.optim.Adagrad, tokens.parameters(),
                                 {"lr": cfg.learning_rate, "eps": goal.ADAGRAD_EPS})
            else:
                trec.in_backward(torch.optim.SGD, tokens.parameters(), {"lr": cfg.learning_rate})
            model = HybridTransformer(tokens, net, d_model)
            sharder = trec.sharder()
            planner = trec.planner(
                topology=trec.topology(world_size=self.world_size, compute_device=self.device.type),
                constraints={TABLE: trec.constraints(sharding_types=[trec.row_wise])})
            plan = planner.collective_plan(model, [sharder], torch.distributed.GroupMember.WORLD)
            self.model = trec.dmp(model, device=self.device, plan=plan, sharders=[sharder])
        with torch.no_grad():
            for offset, rows in self.table_shards():  # each rank's block of the seeded table
                rows.copy_(table[offset:offset + rows.shape[0]].to(rows.device))
        if self.hooks.fault == "skip-allreduce":  # bench verify's negative control: each rank keeps its own
            self.ddp().register_comm_hook(None, _local_gradients)  # dense gradient (the rows still travel)
        self.optimizer = self.build_optimizer([p for _, p in trec.dense_filter(self.model.named_parameters())])
        self.build_data()
        self.plan = str(plan)

    def build_data(self, shards: list[int] | None = None) -> None:
        super().build_data(shards)
        if self.feed is None:  # the synthetic batch's lookups, made once; with --data, each step's (step)
            self.features, self.shape = self.lookups(self.data)

    def lookups(self, data: torch.Tensor):
        """A (B, 2, L) batch of token ids as the table's lookups: both halves' ids as one KeyedJaggedTensor (every
        sequence of length L), and (B, L)."""
        batch, _, length = data.shape
        values = torch.cat([data[:, i].reshape(-1) for i in range(len(FEATURES))])
        features = torchrec().kjt.from_lengths_sync(
            keys=list(FEATURES), values=values,
            lengths=torch.full((len(FEATURES) * batch,), length, dtype=torch.int32)).to(self.device)
        return features, (batch, length)

    def step(self) -> None:
        if self.feed is not None:
            self.next_batch()
            self.features, self.shape = self.lookups(self.data)
        self.optimizer.zero_grad()
        loss = loss_fn(self.model(self.features, *self.shape), self.target, self.cfg.label_smoothing)
        self.track(loss)
        loss.backward()  # DDP's allreduce of the dense part; the table's rows updated by their owners
        self.optimizer.step()

    def set_learning_rate(self, rate: float) -> None:
        """The schedule's rate for the dense optimizer and for the table's fused one (TorchRec hands its rate to
        the fused kernels in the fused optimizer's zero_grad and step)."""
        super().set_learning_rate(rate)
        fused = self.model.fused_optimizer
        for group in fused.param_groups:
            group["lr"] = rate
        fused.zero_grad()

    def evaluate_shard(self) -> goal.Counts:
        """This rank's counts on its part of the held-out split, in step with the other ranks: every forward pass
        looks rows up by all-to-all, so each rank runs as many batches as the rank with the most (rank 0's,
        ceil(ceil(n / W) / b)); a rank whose part is done runs its last batch again, uncounted."""
        n = len(self.feed.dataset.val)
        steps = math.ceil(math.ceil(n / self.world_size) / self.cfg.batch_size)
        counts = goal.Counts()
        batches, last = iter(self.feed.held_out()), None
        self.model.eval()
        with torch.no_grad():
            for _ in range(steps):
                batch = next(batches, None)
                if batch is None and last is None:  # no held-out sample here: one of zeros keeps the step
                    length = self.cfg.seq_len
                    last = (torch.zeros((1, 2, length), dtype=torch.long, device=self.device),
                            torch.zeros((1, length), dtype=torch.long, device=self.device))
                data, target = batch if batch is not None else last
                features, shape = self.lookups(data)
                out = self.model(features, *shape)
                if batch is not None:
                    score(counts, out, target)
                    last = batch
        self.model.train()
        return self.with_train_loss(counts)

    def ddp(self) -> torch.nn.parallel.DistributedDataParallel:
        """The DDP that DistributedModelParallel wrapped the model's dense part in."""
        found = [m for m in self.model.modules() if isinstance(m, torch.nn.parallel.DistributedDataParallel)]
        if not found:
            raise BenchError("torch-hybrid: TorchRec wrapped no part of the model in DDP")
        return found[0]

    # -- the table, sharded -----------------------------------------------------------------------------
    def table_shards(self) -> list[tuple[int, torch.Tensor]]:
        """(first row, rows) of each block of the table this rank holds: views of TorchRec's weights."""
        state = self.model.state_dict()
        key = next(k for k in state if k.endswith(f"embeddings.{TABLE}.weight"))
        return [(int(s.metadata.shard_offsets[0]), s.tensor) for s in state[key].local_shards()]

    def gathered_table(self):
        """The whole table as a numpy array, from every rank's blocks (collective: every rank calls it)."""
        import numpy as np

        mine = [(offset, rows.detach().float().cpu().numpy()) for offset, rows in self.table_shards()]
        blocks = sorted((b for part in torchdist.allgather(mine) for b in part), key=lambda b: b[0])
        return np.concatenate([rows for _, rows in blocks])

    def dense_parameters(self) -> list[tuple[str, torch.nn.Parameter]]:
        return list(self.model.module.net.named_parameters())

    # -- Trainer protocol ---------------------------------------------------------------------------------
    def attribution_unsupported(self) -> str | None:
        return "torch-hybrid: the table's all-to-all runs inside the forward and backward passes, not apart"

    def parameter_arrays(self) -> list[tuple[str, Any]]:
        """The table (gathered) under the single-device model's name, then the dense parameters: the
        reference's order (collective: every rank calls it)."""
        return [("embedding.weight", self.gathered_table())] + [
            (n, p.detach().float().cpu().numpy().copy()) for n, p in self.dense_parameters()]

    def checksum(self) -> str:
        """SHA-256 over the dense parameters and the gathered table: equal on every rank when in sync."""
        h = hashlib.sha256(self.gathered_table().tobytes())
        with torch.no_grad():
            for _, p in self.dense_parameters():
                h.update(p.detach().float().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()

    def fingerprint(self) -> float:
        with torch.no_grad():
            return float(sum(p.detach().double().sum() for _, p in self.dense_parameters()) +
                         sum(rows.detach().double().sum() for _, rows in self.table_shards()))

    def parameters(self):
        return [p for _, p in self.dense_parameters()]

    def gradient_buffers(self, dtype) -> list[torch.Tensor]:
        raise NotImplementedError  # no exchange-only windows (attribution_unsupported)

    def allgather(self, obj: Any) -> list[Any]:
        return torchdist.allgather(obj)

    def environment(self) -> dict[str, Any]:
        import importlib.metadata

        record = super().environment()
        record["distribution"] = {"library": "torchrec", "backend": self.backend,
                                  "torchrec": importlib.metadata.version("torchrec"),
                                  "fbgemm_gpu": _version("fbgemm-gpu-cpu") or _version("fbgemm-gpu"),
                                  "table_sharding": "row_wise", "dense": "DistributedDataParallel",
                                  "plan": self.plan}
        return record

    def teardown(self) -> None:
        torchdist.close_group()
        self.model = None


def _local_gradients(state, bucket):
    """A DDP communication hook that communicates nothing: the bucket's local gradients, as they are."""
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def _version(dist: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
