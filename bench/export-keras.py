#!/usr/bin/env python3
"""Keras applications as frozen TensorFlow GraphDefs, with random weights: held-out TF models
(docs/tf.md, "Convolutional GraphDefs"). For each MODEL it writes, into OUT (default keras-models):

  MODEL.pb            the frozen GraphDef (variables made constants), input 'input' [1, 224, 224, 3]
  MODEL_input_0.pb    the input, N(0, 1) from numpy's seed 0, as an ONNX TensorProto
  MODEL_output_0.pb   TensorFlow's output for it (the logits: classifier_activation=None)

BatchNorm layers get random affine parameters and the statistics of one random batch (momentum 0,
one training-mode call), so that activations stay O(1) through the net as in a trained one;
nothing is fitted to anything and nothing is downloaded. Then, for each model:

    build/placesim run OUT/MODEL.pb --feed input=OUT/MODEL_input_0.pb \\
        --check OUT/MODEL_output_0.pb --rtol 1e-3 --atol 1e-4

Needs TensorFlow from PyPI in a virtual environment (the project's rule for reference figures):
    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu numpy
    /tmp/tfvenv/bin/python bench/export-keras.py [--out DIR] [MODEL...]
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorproto  # noqa: E402  (bench/tensorproto.py)

MODELS = ["MobileNetV2", "MobileNetV3Small", "EfficientNetB0", "ResNet50", "DenseNet121", "InceptionV3"]


def tensor_proto(a, name):
    a = np.ascontiguousarray(a, dtype="<f4")
    return tensorproto.tensor_proto(a.shape, a.tobytes(), name)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="keras-models")
    ap.add_argument("models", nargs="*", default=MODELS)
    args = ap.parse_args()
    import tensorflow as tf  # after argparse: --help works without it
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for name in args.models:
        tf.random.set_seed(0)
        ctor = getattr(tf.keras.applications, name, None)
        if ctor is None:
            print("export-keras: %s: not a tf.keras.applications model" % name, file=sys.stderr)
            failed += 1
            continue
        m = ctor(weights=None, input_shape=(224, 224, 3), classifier_activation=None)
        for layer in m.layers:
            if isinstance(layer, tf.keras.layers.BatchNormalization):
                layer.momentum = 0.0
                if layer.gamma is not None:
                    layer.gamma.assign(tf.random.uniform(layer.gamma.shape, 0.5, 1.5))
                if layer.beta is not None:
                    layer.beta.assign(tf.random.normal(layer.beta.shape, 0.0, 0.1))
        m(tf.random.normal([4, 224, 224, 3]), training=True)
        f = tf.function(lambda x: m(x, training=False))
        frozen = convert_variables_to_constants_v2(
            f.get_concrete_function(tf.TensorSpec([1, 224, 224, 3], tf.float32, name="input")))
        with open(os.path.join(args.out, name + ".pb"), "wb") as fh:
            fh.write(frozen.graph.as_graph_def().SerializeToString())
        x = np.random.default_rng(0).standard_normal((1, 224, 224, 3)).astype(np.float32)
        y = frozen(tf.constant(x))
        y = (y[0] if isinstance(y, (list, tuple)) else y).numpy()
        tensorproto.write(os.path.join(args.out, name + "_input_0.pb"), tensor_proto(x, "input"))
        tensorproto.write(os.path.join(args.out, name + "_output_0.pb"), tensor_proto(y, "output"))
        print("%s: %d nodes, output %s, |max| %.3g" % (name, len(frozen.graph.as_graph_def().node),
                                                        tuple(y.shape), float(np.abs(y).max())), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
