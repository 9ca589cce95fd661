"""CTR-DNN in PyTorch, the competitor of heterps' CPU training benchmark.

Same model as config/examples/models/ctrdnn.toml: one shared 1,000,001 x 9
embedding table for 26 sum-pooled slots (nn.EmbeddingBag, sparse gradients),
concatenated with 13 dense features, FC 512-256-128-32 with ReLU, one logit,
BCE-with-logits; Adam on the dense parameters and SparseAdam on the table,
lr 1e-3. It trains on the batches that bench/pytorch/main.go wrote (the same
ones heterps trains on) and prints one JSON object.
"""
import argparse
import json
import os
import time

import numpy as np
import torch
from torch import nn


class CTRDNN(nn.Module):
    def __init__(self, vocab, dim, slots, dense, hidden):
        super().__init__()
        self.slots, self.dim = slots, dim
        self.emb = nn.EmbeddingBag(vocab, dim, mode="sum", sparse=True)
        nn.init.uniform_(self.emb.weight, -0.05, 0.05)
        layers, width = [], slots * dim + dense
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, ids, offsets, dense):
        pooled = self.emb(ids, offsets).view(-1, self.slots * self.dim)
        return self.mlp(torch.cat([pooled, dense], dim=1)).squeeze(1)


def load(folder):
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    ids = np.fromfile(os.path.join(folder, "ids.i64"), dtype="<i8")
    offsets = np.fromfile(os.path.join(folder, "offsets.i64"), dtype="<i8")
    dense = np.fromfile(os.path.join(folder, "dense.f32"), dtype="<f4")
    labels = np.fromfile(os.path.join(folder, "labels.f32"), dtype="<f4")
    batches, size, slots, nd = meta["batches"], meta["batch"], meta["slots"], meta["dense"]
    out, id_at = [], 0
    for b in range(batches):
        offs = offsets[b * (size * slots + 1):(b + 1) * (size * slots + 1)]
        n = int(offs[-1])
        out.append((
            torch.from_numpy(ids[id_at:id_at + n].copy()),
            torch.from_numpy(offs[:-1].copy()),
            torch.from_numpy(dense[b * size * nd:(b + 1) * size * nd].reshape(size, nd).copy()),
            torch.from_numpy(labels[b * size:(b + 1) * size].copy()),
        ))
        id_at += n
    return meta, out


def make_step(model, forward, batches):
    """step(i) trains forward (model, or a wrapper of it such as DDP) on
    batches[i % len(batches)] and returns the loss: Adam on the dense
    parameters, SparseAdam on the table, lr 1e-3, BCE with logits."""
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    opt = torch.optim.Adam(dense_params, lr=1e-3)
    sparse_opt = torch.optim.SparseAdam([model.emb.weight], lr=1e-3)
    loss_fn = nn.BCEWithLogitsLoss()

    def step(i):
        ids, offs, dense, labels = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        sparse_opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(ids, offs, dense), labels)
        loss.backward()
        opt.step()
        sparse_opt.step()
        return loss.item()

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    device = torch.device(args.device)
    meta, batches = load(args.data)
    batches = [tuple(t.to(device) for t in b) for b in batches]
    model = CTRDNN(meta["vocab"], meta["dim"], meta["slots"], meta["dense"], meta["hidden"]).to(device)
    step = make_step(model, model, batches)

    for i in range(args.warmup):
        step(i)
    start = time.perf_counter()
    losses = [step(args.warmup + i) for i in range(args.steps)]
    secs = time.perf_counter() - start
    print(json.dumps({
        "torch": torch.__version__, "device": args.device, "threads": args.threads, "steps": args.steps,
        "batch": meta["batch"], "seconds": secs,
        "samples_per_s": args.steps * meta["batch"] / secs,
        "loss_last50": float(np.mean(losses[-50:])),
    }))


if __name__ == "__main__":
    main()
