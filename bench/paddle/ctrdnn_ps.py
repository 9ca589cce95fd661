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
mode. Worker i trains on batches i, i+W, i+2W, ... written to a text
file in the dataset's MultiSlot format, through exe.train_from_dataset:
fleet's DistMultiTrainer with its DownpourLite device worker, which pulls
the dense parameters from the server (a plain exe.run of the transformed
program only pushes: the worker's dense parameters never change). It
prints one JSON object with its timed window's wall-clock start and end,
so that the caller can add the workers' samples over the union of their
windows; the loss is the mean of the last 50 batches' as the trainer
printed them.
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
    # The dataset feeds each sample's slots ids as one sequence (LoD level
    # 1): [B x slots, 1], the column distributed_lookup_table takes, looked
    # up at once, then one row of slots x dim per sample.
    ids = paddle.static.data("ids", [-1, 1], "int64", lod_level=1)
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
    return [ids, dense, label], loss


def write_slots(path, batches, first, count):
    """Writes count batches, cycling from index first, in the MultiSlot text
    format the dataset reads: per sample, each slot's value count then its
    values, in the order of the inputs (ids, dense, label)."""
    with open(path, "w") as f:
        for i in range(first, first + count):
            ids, dense, labels = batches[i % len(batches)]
            for s in range(len(labels)):
                f.write(" ".join([str(ids.shape[1])] + [str(v) for v in ids[s]] +
                                 [str(dense.shape[1])] + [repr(float(v)) for v in dense[s]] +
                                 ["1", repr(float(labels[s][0]))]) + "\n")


def train(exe, inputs, loss, path, batch, threads):
    """Trains on the file with fleet's DistMultiTrainer (the device worker
    pulls the dense parameters from the server and pushes gradients; a
    plain exe.run of the program would push but never pull). Returns the
    loss of each batch, as the trainer prints it."""
    dataset = paddle.distributed.QueueDataset()
    dataset.init(batch_size=batch, thread_num=threads, use_var=inputs, pipe_command="cat")
    dataset.set_filelist([path])
    # The trainer prints fetched values from C++ to fd 1: catch them there.
    out = path + ".fetched"
    sys.stdout.flush()
    saved = os.dup(1)
    with open(out, "w") as f:
        os.dup2(f.fileno(), 1)
        try:
            exe.train_from_dataset(paddle.static.default_main_program(), dataset, fetch_list=[loss],
                                   fetch_info=["loss"], print_period=1)
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
    losses = []
    with open(out) as f:
        for line in f:
            if "loss" in line:  # time: [...], batch: [3], loss[1]:[0.643588]
                try:
                    losses.append(float(line.rsplit(":", 1)[1].split()[0].strip("[]")))
                except (IndexError, ValueError):
                    pass
    return losses


def server_cpu():
    """The server's CPU seconds so far (user + system, all its threads), read
    from /proc for the pid bench/paddle passes in BENCH_PS_SERVER_PID; 0
    when it is not set."""
    pid = os.environ.get("BENCH_PS_SERVER_PID")
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200, help="timed steps per worker")
    ap.add_argument("--warmup", type=int, default=20)
    args = ap.parse_args()
    # train_from_dataset writes <program id>_train_desc.prototxt into the
    # working directory: keep it out of the caller's, in the data folder.
    args.data = os.path.abspath(args.data)
    os.chdir(args.data)
    paddle.enable_static()
    paddle.seed(1)
    fleet.init()
    meta, batches = ctrdata.load(args.data)
    inputs, loss = build(meta)
    strategy = fleet.DistributedStrategy()
    strategy.a_sync = True
    opt = fleet.distributed_optimizer(paddle.optimizer.Adam(learning_rate=1e-3), strategy)
    opt.minimize(loss)
    if fleet.is_server():
        fleet.init_server()
        fleet.run_server()
        return
    me, workers = fleet.worker_index(), fleet.worker_num()
    mine = batches[me::workers]
    warm = os.path.join(args.data, f"worker{me}-warmup.txt")
    timed = os.path.join(args.data, f"worker{me}-timed.txt")
    write_slots(warm, mine, 0, max(args.warmup, 1))
    write_slots(timed, mine, args.warmup, args.steps)
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(paddle.static.default_startup_program())
    fleet.init_worker()
    train(exe, inputs, loss, warm, meta["batch"], args.threads)
    fleet.barrier_worker()
    start, cpu, server = time.time(), time.process_time(), server_cpu()
    losses = train(exe, inputs, loss, timed, meta["batch"], args.threads)
    end, cpu, server = time.time(), time.process_time() - cpu, server_cpu() - server
    fleet.barrier_worker()
    fleet.stop_worker()
    print(json.dumps({
        "paddle": paddle.__version__, "worker": me, "workers": workers, "threads": args.threads,
        "steps": args.steps, "batch": meta["batch"], "start": start, "end": end,
        "cpu_seconds": cpu, "server_cpu_seconds": server,
        "samples_per_s": args.steps * meta["batch"] / (end - start),
        "losses_seen": len(losses),
        "loss_last50": float(np.mean(losses[-50:])) if losses else float("nan"),
    }))


if __name__ == "__main__":
    main()
