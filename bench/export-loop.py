#!/usr/bin/python3
"""ONNX models with a Loop (issue 19), with reference inputs and outputs, for `placesim run
--check` and `placesim sim`:

    /usr/bin/python3 bench/export-loop.py OUT
    build/placesim run OUT/rnn_loop.onnx --feed x=OUT/rnn_loop_input_0.pb \\
        --check OUT/rnn_loop_output_0.pb --rtol 1e-4 --atol 1e-6

- rnn_loop.onnx: a torch.jit.script module whose forward runs a Python for loop (a recurrent
  cell, h = tanh(W h + U x_t + b) over the 8 steps of its input, plus a running sum), exported
  by torch.onnx as a Loop node with its body; PyTorch's output is the reference.
- scan_loop.onnx: a Loop written with onnx's helper: three iterations of v = 2 v + i with the
  iterations' values of v + y (y from the graph around the body) as a scan output; numpy
  computes the reference. Its two outputs are written as scan_loop_output_0.pb and _1.pb.

Weights are random (torch.manual_seed(0)); nothing is downloaded. Needs Debian's python3-torch
for the first and python3-onnx for the second (a model whose package is missing is skipped
with a line on stderr; the script exits 1 only when neither can be made)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorproto  # noqa: E402  (bench/tensorproto.py)


def save(path, arr, name):
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    tensorproto.write(path, tensorproto.tensor_proto(arr.shape, arr.tobytes(), name))


def rnn_loop(out):
    import torch

    torch.manual_seed(0)

    class Rnn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Linear(32, 32)
            self.u = torch.nn.Linear(16, 32)

        def forward(self, x):  # x: [steps, batch, 16]
            h = torch.zeros(x.size(1), 32)
            acc = torch.zeros(x.size(1), 32)
            for t in range(x.size(0)):
                h = torch.tanh(self.w(h) + self.u(x[t]))
                acc = acc + h
            return acc

    m = torch.jit.script(Rnn().eval())
    x = torch.randn(8, 4, 16)
    with torch.no_grad():
        y = m(x)
    path = os.path.join(out, "rnn_loop.onnx")
    torch.onnx.export(m, (x,), path, opset_version=13, input_names=["x"], output_names=["y"])
    save(os.path.join(out, "rnn_loop_input_0.pb"), x.numpy(), "x")
    save(os.path.join(out, "rnn_loop_output_0.pb"), y.numpy(), "y")
    with open(path, "rb") as f:
        if b"Loop" not in f.read():
            raise RuntimeError("torch.onnx exported no Loop node")


def scan_loop(out):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    body = h.make_graph(
        [h.make_node("Identity", ["c"], ["c_out"]),
         h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT),
         h.make_node("Mul", ["v", "two"], ["v2"]),
         h.make_node("Add", ["v2", "fi"], ["v_out"]),
         h.make_node("Add", ["v_out", "y"], ["s"])],
        "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("c", T.BOOL, []),
         h.make_tensor_value_info("v", T.FLOAT, [2])],
        [h.make_tensor_value_info("c_out", T.BOOL, []), h.make_tensor_value_info("v_out", T.FLOAT, [2]),
         h.make_tensor_value_info("s", T.FLOAT, [2])],
        [nh.from_array(np.array(2.0, np.float32), "two")])
    y = np.array([10, 100], np.float32)
    g = h.make_graph(
        [h.make_node("Loop", ["M", "cond", "x"], ["vf", "scans"], body=body)], "scan_loop",
        [h.make_tensor_value_info("x", T.FLOAT, [2])],
        [h.make_tensor_value_info("vf", T.FLOAT, [2]), h.make_tensor_value_info("scans", T.FLOAT, [3, 2])],
        [nh.from_array(np.array(3, np.int64), "M"), nh.from_array(np.array(True), "cond"),
         nh.from_array(y, "y")])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 13)])
    onnx.checker.check_model(m)
    onnx.save(m, os.path.join(out, "scan_loop.onnx"))
    x = np.array([1, 2], np.float32)
    v, scans = x.copy(), []
    for i in range(3):
        v = v * 2 + i
        scans.append(v + y)
    save(os.path.join(out, "scan_loop_input_0.pb"), x, "x")
    save(os.path.join(out, "scan_loop_output_0.pb"), v, "vf")
    save(os.path.join(out, "scan_loop_output_1.pb"), np.stack(scans), "scans")


def main():
    if len(sys.argv) != 2:
        print("usage: bench/export-loop.py OUT", file=sys.stderr)
        return 2
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    made = 0
    for fn in (rnn_loop, scan_loop):
        try:
            fn(out)
            made += 1
        except ImportError as e:
            print(f"export-loop: {fn.__name__}: skipped ({e})", file=sys.stderr)
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())
