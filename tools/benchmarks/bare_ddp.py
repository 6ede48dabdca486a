"""A bare DDP training loop: the reference bench torch-ddp is compared against.

Same model definition, batch, optimizer and step count as ``bench torch-ddp``; none of bench's
harness (no windows, no progress bar, no result files). Started by torchrun:

    torchrun --nproc-per-node 2 tools/benchmarks/bare_ddp.py --model vgg16 --image-size 64 --batch-size 8 \
        --warmup-steps 3 --steps 20

Prints one JSON line on rank 0: total images/s = world * batch * steps / slowest rank's time.
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

from bench.models import model as model_spec


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="vgg16")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--warmup-steps", type=int, default=3)
    p.add_argument("--steps", type=int, default=20)
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", world))))
    torch.manual_seed(42)
    model = torch.nn.parallel.DistributedDataParallel(model_spec(a.model).build_torch(a.num_classes))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    data = torch.randn(a.batch_size, 3, a.image_size, a.image_size)
    target = torch.randint(0, a.num_classes, (a.batch_size,))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    for _ in range(a.warmup_steps):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    elapsed = torch.tensor([time.perf_counter() - t0])
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(json.dumps({"samples_per_sec_total": world * a.batch_size * a.steps / elapsed.item()}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
