#!/usr/bin/env python3
"""ONNX Runtime reference timing for bench/bench-kernels.sh (not a build dependency).

ort-time.py MODEL.onnx STEPS [--input X.pb] [--save Y.pb]: one intra-op and one inter-op
thread, sequential execution, the graph fed arange(n)/n in its input's shape (unknown dims 1), or
the TensorProto X.pb for its first input, one warm-up run; --save writes the first output as a
TensorProto (the onnx package needed then). Prints one JSON object with the medians of wall and
calling-thread CPU time per run (with one intra-op thread ORT runs the kernels on the calling
thread)."""
import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    opts = dict(zip(sys.argv[3::2], sys.argv[4::2]))
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
    if "--input" in opts:
        import onnx
        from onnx import numpy_helper
        t = onnx.TensorProto()
        with open(opts["--input"], "rb") as f:
            t.ParseFromString(f.read())
        feeds[sess.get_inputs()[0].name] = numpy_helper.to_array(t)
    out = sess.run(None, feeds)
    if "--save" in opts:
        import onnx
        from onnx import numpy_helper
        with open(opts["--save"], "wb") as f:
            f.write(numpy_helper.from_array(out[0], "output").SerializeToString())
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
