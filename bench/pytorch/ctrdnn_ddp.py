"""CTR-DNN by PyTorch DistributedDataParallel: the competitor of heterps run.

The model, optimisers and batches of ctrdnn.py, trained data-parallel by
--world processes on loopback (torch.distributed over gloo, the CPU
backend): each step every rank trains its 1/world of the rows of the same
global batch, DDP averages the dense gradients by allreduce and the
embedding's sparse gradients by gloo's sparse allreduce, and every rank
applies Adam and SparseAdam to its full copy. Each rank runs --threads
threads. Rank 0 prints one JSON object: samples/s of the whole job over the
timed steps (from a barrier before the first to one after the last).
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

from ctrdnn import CTRDNN, load, make_step


def shard(batch, slots, rank, world):
    """Rows [rank*n/world, (rank+1)*n/world) of a batch of n rows."""
    ids, offs, dense, labels = batch
    n = labels.shape[0]
    lo, hi = rank * n // world, (rank + 1) * n // world
    first = int(offs[lo * slots])
    end = int(offs[hi * slots]) if hi < n else ids.shape[0]
    return (ids[first:end].clone(), (offs[lo * slots:hi * slots] - first).clone(),
            dense[lo:hi].clone(), labels[lo:hi].clone())


def worker(rank, args):
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.world)
    meta, batches = load(args.data)
    batches = [shard(b, meta["slots"], rank, args.world) for b in batches]
    model = CTRDNN(meta["vocab"], meta["dim"], meta["slots"], meta["dense"], meta["hidden"])
    step = make_step(model, DistributedDataParallel(model), batches)

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    start = time.perf_counter()
    losses = [step(args.warmup + i) for i in range(args.steps)]
    dist.barrier()
    secs = time.perf_counter() - start
    loss = torch.tensor([float(np.mean(losses[-50:]))])
    dist.all_reduce(loss)
    if rank == 0:
        print(json.dumps({
            "torch": torch.__version__, "world": args.world, "threads": args.threads, "steps": args.steps,
            "batch": meta["batch"], "seconds": secs,
            "samples_per_s": args.steps * meta["batch"] / secs,
            "loss_last50": loss.item() / args.world,
        }), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--world", type=int, default=2, help="processes (ranks)")
    ap.add_argument("--threads", type=int, default=1, help="threads of each rank")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--port", type=int, required=True, help="loopback port of the rendezvous")
    args = ap.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
