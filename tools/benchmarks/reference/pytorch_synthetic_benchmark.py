# hvdbench changes (all of them; see benchmarks/reference/README.md):
#  1. torchvision has no CPU wheel on the machines hvdbench is tested on: when it cannot be imported, the
#     model comes from bench.models (torch_vgg, torch_resnet, ...), hvdbench's torchvision-layout definitions (same layers,
#     same parameter counts: tested in tests/framework/test_models.py).
#  2. The last line also prints every iteration's time at full precision as one JSON line
#     (the script's own lines round img/sec to one decimal).
#  3. On a GPU, the warm-up and each timed iteration end when the GPU has finished its queued work
#     (torch.cuda.synchronize()). Without it nothing in the timed loop waits for the GPU on one rank:
#     DistributedOptimizer registers no allreduce hooks when size() is 1, so the timer measured how fast
#     the CPU queued kernels (over 2 warm-up and 6 timed steps, VGG-16 at 4837 and 6050 img/s on one H100
#     that trains it at 1221). With two ranks or more, step() already waits for the gradients' allreduce,
#     which waits for the backward pass.
import argparse
import json
import torch.backends.cudnn as cudnn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed
try:
    from torchvision import models
except ImportError:  # hvdbench change 1
    import types

    from bench.models import model

    models = types.SimpleNamespace(**{n: (lambda n=n: model(n).build_torch(1000))
                                      for n in ('vgg16', 'vgg19', 'resnet50', 'resnet101')})
import horovod.torch as hvd
import timeit
import numpy as np

# Benchmark settings
parser = argparse.ArgumentParser(description='PyTorch Synthetic Benchmark',
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
parser.add_argument('--fp16-allreduce', action='store_true', default=False,
                    help='use fp16 compression during allreduce')

parser.add_argument('--model', type=str, default='resnet50',
                    help='model to benchmark')
parser.add_argument('--batch-size', type=int, default=32,
                    help='input batch size')

parser.add_argument('--num-warmup-batches', type=int, default=10,
                    help='number of warm-up batches that don\'t count towards benchmark')
parser.add_argument('--num-batches-per-iter', type=int, default=10,
                    help='number of batches per benchmark iteration')
parser.add_argument('--num-iters', type=int, default=10,
                    help='number of benchmark iterations')

parser.add_argument('--no-cuda', action='store_true', default=False,
                    help='disables CUDA training')

parser.add_argument('--use-adasum', action='store_true', default=False,
                    help='use adasum algorithm to do reduction')

args = parser.parse_args()
args.cuda = not args.no_cuda and torch.cuda.is_available()

hvd.init()

if args.cuda:
    # Horovod: pin GPU to local rank.
    torch.cuda.set_device(hvd.local_rank())

cudnn.benchmark = True

# Set up standard model.
model = getattr(models, args.model)()

# By default, Adasum doesn't need scaling up learning rate.
lr_scaler = hvd.size() if not args.use_adasum else 1

if args.cuda:
    # Move model to GPU.
    model.cuda()
    # If using GPU Adasum allreduce, scale learning rate by local_size.
    if args.use_adasum and hvd.nccl_built():
        lr_scaler = hvd.local_size()

optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler)

# Horovod: (optional) compression algorithm.
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none

# Horovod: wrap optimizer with DistributedOptimizer.
optimizer = hvd.DistributedOptimizer(optimizer,
                                     named_parameters=model.named_parameters(),
                                     compression=compression,
                                     op=hvd.Adasum if args.use_adasum else hvd.Average)

# Horovod: broadcast parameters & optimizer state.
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

# Set up fixed fake data
data = torch.randn(args.batch_size, 3, 224, 224)
target = torch.LongTensor(args.batch_size).random_() % 1000
if args.cuda:
    data, target = data.cuda(), target.cuda()


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()


def benchmark_steps(number):  # hvdbench change 3
    for _ in range(number):
        benchmark_step()
    if args.cuda:
        torch.cuda.synchronize()


def log(s, nl=True):
    if hvd.rank() != 0:
        return
    print(s, end='\n' if nl else '')


log('Model: %s' % args.model)
log('Batch size: %d' % args.batch_size)
device = 'GPU' if args.cuda else 'CPU'
log('Number of %ss: %d' % (device, hvd.size()))

# Warm-up
log('Running warmup...')
timeit.timeit(lambda: benchmark_steps(args.num_warmup_batches), number=1)

# Benchmark
log('Running benchmark...')
img_secs = []
iter_times = []
for x in range(args.num_iters):
    time = timeit.timeit(lambda: benchmark_steps(args.num_batches_per_iter), number=1)
    img_sec = args.batch_size * args.num_batches_per_iter / time
    log('Iter #%d: %.1f img/sec per %s' % (x, img_sec, device))
    img_secs.append(img_sec)
    iter_times.append(time)

# Results
img_sec_mean = np.mean(img_secs)
img_sec_conf = 1.96 * np.std(img_secs)
log('Img/sec per %s: %.1f +-%.1f' % (device, img_sec_mean, img_sec_conf))
log('Total img/sec on %d %s(s): %.1f +-%.1f' %
    (hvd.size(), device, hvd.size() * img_sec_mean, hvd.size() * img_sec_conf))
log(json.dumps({'hvdbench_reference': 'pytorch', 'batch_size': args.batch_size,  # hvdbench change 2
                'batches_per_iter': args.num_batches_per_iter, 'size': hvd.size(), 'iter_s': iter_times}))
