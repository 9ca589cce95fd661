"""CTR-DNN in PaddlePaddle's parameter-server mode (paddle 2.6,
paddle.distributed.fleet, static graph, async): the competitor of
bench/paddle beside `heterps run` on 2 nodes.

One process per role, the role from fleet's environment variables
(TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM,
PADDLE_TRAINER_ID, POD_IP, PADDLE_PORT), all on loopback; bench/paddle
starts 1 server and 2 workers. Same model as ctrdnn_single.py: the
1,000,001 x 9 table is a sparse table on the server
(paddle.static.nn.sparse_embedding), whose rows Adam updates only when a
batch touches them (the_one_ps's SparseAdamSGDRule, chosen from the
optimizer); the dense parameters are Adam's, on the server too in async
mode. Worker i trains on batches i, i+W, i+2W, ... and prints one JSON
object with its timed window's wall-clock start and end, so that the
caller can add the workers' samples over the union of their windows.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import paddle
import paddle.distributed.fleet as fleet
import paddle.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ctrdata  # noqa: E402


def build(meta):
    slots, dim = meta["slots"], meta["dim"]
    # distributed_lookup_table takes ids as [N, 1]: the batch's B x slots
    # ids in one column, looked up at once, then one row of slots x dim
    # per sample.
    ids = paddle.static.data("ids", [-1, 1], "int64")
    dense = paddle.static.data("dense", [-1, meta["dense"]], "float32")
    label = paddle.static.data("label", [-1, 1], "float32")
    emb = paddle.static.nn.sparse_embedding(
        input=ids, size=[meta["vocab"], dim],
        param_attr=paddle.ParamAttr(name="emb", initializer=paddle.nn.initializer.Uniform(-0.05, 0.05)))
    x = paddle.concat([paddle.reshape(emb, [-1, slots * dim]), dense], axis=1)
    for h in meta["hidden"]:
        x = paddle.static.nn.fc(x, h, activation="relu")
    logit = paddle.static.nn.fc(x, 1)
    loss = paddle.mean(F.binary_cross_entropy_with_logits(logit, label))
    return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200, help="timed steps per worker")
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    paddle.enable_static()
    paddle.seed(1)
    fleet.init()
    meta, batches = ctrdata.load(args.data)
    loss = build(meta)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    opt = fleet.distributed_optimizer(paddle.optimizer.Adam(learning_rate=1e-3), strategy)
    opt.minimize(loss)
    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()
        return
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    me, workers = fleet.worker_index(), fleet.worker_num()
    mine = batches[me::workers]
    prog = paddle.static.default_main_program()

    def step(i):
        ids, dense, labels = mine[i % len(mine)]
        out, = exe.run(prog, feed={"ids": ids.reshape(-1, 1), "dense": dense, "label": labels}, fetch_list=[loss])
        return float(np.asarray(out).reshape(-1)[0])

    for i in range(args.warmup):
        step(i)
    fleet.barrier_worker()
    start = time.time()
    losses = [step(args.warmup + i) for i in range(args.steps)]
    end = time.time()
    fleet.stop_worker()
    print(json.dumps({
        "paddle": paddle.__version__, "worker": me, "workers": workers, "threads": args.threads,
        "steps": args.steps, "batch": meta["batch"], "start": start, "end": end,
        "samples_per_s": args.steps * meta["batch"] / (end - start),
        "loss_last50": float(np.mean(losses[-50:])),
    }))


if __name__ == "__main__":
    main()
