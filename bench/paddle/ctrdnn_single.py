"""CTR-DNN in PaddlePaddle (3.x, dynamic graph), single process: the
competitor of bench/paddle beside heterps train.

Same model as config/examples/models/ctrdnn.toml and bench/pytorch: one
1,000,001 x 9 table shared by 26 sum-pooled one-id slots (nn.Embedding with
sparse gradients), concatenated with 13 dense features, FC 512-256-128-32
with ReLU and one logit, BCE-with-logits; Adam on the dense parameters and
lazy Adam (lazy_mode: only the rows in the batch move) on the table,
lr 1e-3. Prints one JSON object.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import paddle
from paddle import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctrdata  # noqa: E402


class CTRDNN(nn.Layer):
    def __init__(self, vocab, dim, slots, dense, hidden):
        super().__init__()
        self.width = slots * dim
        init = paddle.ParamAttr(initializer=nn.initializer.Uniform(-0.05, 0.05))
        self.emb = nn.Embedding(vocab, dim, sparse=True, weight_attr=init)
        layers, width = [], slots * dim + dense
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, 1))
        self.mlp = nn.Sequential(*layers)

    def forward(self, ids, dense):
        pooled = self.emb(ids).reshape([-1, self.width])
        return self.mlp(paddle.concat([pooled, dense], axis=1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    paddle.set_device("cpu")
    paddle.base.core.set_num_threads(args.threads)
    paddle.seed(1)
    meta, batches = ctrdata.load(args.data)
    batches = [tuple(paddle.to_tensor(a) for a in b) for b in batches]
    model = CTRDNN(meta["vocab"], meta["dim"], meta["slots"], meta["dense"], meta["hidden"])
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("emb.")]
    opt = paddle.optimizer.Adam(learning_rate=1e-3, parameters=dense_params)
    sparse_opt = paddle.optimizer.Adam(learning_rate=1e-3, parameters=[model.emb.weight], lazy_mode=True)
    loss_fn = nn.BCEWithLogitsLoss()

    def step(i):
        ids, dense, labels = batches[i % len(batches)]
        loss = loss_fn(model(ids, dense), labels)
        loss.backward()
        opt.step()
        sparse_opt.step()
        opt.clear_grad()
        sparse_opt.clear_grad()
        return float(loss)

    for i in range(args.warmup):
        step(i)
    start, cpu = time.perf_counter(), time.process_time()
    losses = [step(args.warmup + i) for i in range(args.steps)]
    secs, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(json.dumps({
        "paddle": paddle.__version__, "threads": args.threads, "steps": args.steps, "batch": meta["batch"],
        "seconds": secs, "cpu_seconds": cpu, "samples_per_s": args.steps * meta["batch"] / secs,
        "loss_last50": float(np.mean(losses[-50:])),
    }))


if __name__ == "__main__":
    main()
