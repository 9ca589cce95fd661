"""The batches bench/paddle/main.go wrote (bench/internal/ctrbench's raw
arrays, the same ones heterps and bench/pytorch train on), as numpy arrays
shaped for PaddlePaddle. Needs numpy only, so that both Paddle versions'
scripts share it.
"""
import json
import os

import numpy as np


def load(folder):
    """Returns meta and a list of (ids [B, slots] int64, dense [B, dense]
    float32, labels [B, 1] float32). Every bag must hold one id (the
    synthetic generator draws one per slot): the sum-pooling of a one-id bag
    is that id's row, so the model looks ids up as a [B, slots] tensor."""
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
        if not np.all(np.diff(offs) == 1):
            raise SystemExit(f"{folder}: batch {b} has bags of other than one id; this benchmark supports one id per slot")
        n = int(offs[-1])
        out.append((
            ids[id_at:id_at + n].reshape(size, slots).copy(),
            dense[b * size * nd:(b + 1) * size * nd].reshape(size, nd).copy(),
            labels[b * size:(b + 1) * size].reshape(size, 1).copy(),
        ))
        id_at += n
    return meta, out
