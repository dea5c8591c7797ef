#!/usr/bin/env python3
"""ONNX Runtime reference timing for bench/bench-kernels.sh (not a build dependency).

ort-time.py MODEL.onnx STEPS: one intra-op and one inter-op thread, sequential execution, the
graph fed arange(n)/n in its input's shape (unknown dims 1), one warm-up run. Prints one JSON
object with the medians of wall and calling-thread CPU time per run (with one intra-op thread ORT
runs the kernels on the calling thread)."""
import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in i.shape]
        n = int(np.prod(shape))
        feeds[i.name] = (np.arange(n, dtype=np.float64) / n).astype(np.float32).reshape(shape)
    sess.run(None, feeds)
    wall, cpu = [], []
    for _ in range(steps):
        w0, c0 = time.perf_counter(), time.thread_time()
        sess.run(None, feeds)
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - w0)
    print(json.dumps({"bench": "ort", "model": path, "ort": ort.__version__, "steps": steps,
                      "wall_ms": round(statistics.median(wall) * 1e3, 2),
                      "cpu_ms": round(statistics.median(cpu) * 1e3, 2)}))


if __name__ == "__main__":
    main()
