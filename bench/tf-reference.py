#!/usr/bin/env python3
"""TensorFlow's own outputs for the frozen GraphDefs of ../shared/data/tf that placesim runs
(lstm.pb and gru.pb by default): the references tests/cli-tf.sh checks placesim against.

For each MODEL it writes, into OUT (default tests/data/tf):
  MODEL_X.pb          the input X, float32 [BATCH, 784], N(0, 1) from numpy's seed 0
  MODEL_keep_prob.pb  keep_prob = 1.0 (the dropout these graphs end with is then the identity:
                      floor(1 + U[0, 1)) = 1, whatever the random draw)
  MODEL_output_0.pb   TensorFlow's output:0 for them (float32)
as ONNX TensorProto files (bench/tensorproto.py: no onnx package needed).

Needs TensorFlow from PyPI in a virtual environment (the project's rule for reference figures):
    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu numpy
    /tmp/tfvenv/bin/python bench/tf-reference.py [--batch 2] [--out tests/data/tf] [MODEL...]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorproto  # noqa: E402  (bench/tensorproto.py)

write = tensorproto.write


def tensor_proto(a, name):
    a = np.ascontiguousarray(a, dtype="<f4")
    return tensorproto.tensor_proto(a.shape, a.tobytes(), name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "tf"))
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "tf"))
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("models", nargs="*", default=["lstm", "gru"])
    args = ap.parse_args()
    import tensorflow as tf  # after argparse: --help works without it
    tf1 = tf.compat.v1
    tf1.disable_eager_execution()
    os.makedirs(args.out, exist_ok=True)
    x = np.random.RandomState(0).randn(args.batch, 784).astype(np.float32)
    for m in args.models:
        path = os.path.join(args.data, m + ".pb")
        gd = tf1.GraphDef()
        with open(path, "rb") as f:
            gd.ParseFromString(f.read())
        g = tf.Graph()
        with g.as_default():
            tf1.import_graph_def(gd, name="")
        with tf1.Session(graph=g) as s:
            y = s.run("output:0", feed_dict={"X:0": x, "keep_prob:0": 1.0})
        write(os.path.join(args.out, m + "_X.pb"), tensor_proto(x, "X"))
        write(os.path.join(args.out, m + "_keep_prob.pb"), tensor_proto(np.float32(1.0), "keep_prob"))
        write(os.path.join(args.out, m + "_output_0.pb"), tensor_proto(y, "output"))
        print("tf-reference: %s: output %s, |max| %.4g (TensorFlow %s)" % (m, y.shape, np.abs(y).max(), tf.__version__),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
