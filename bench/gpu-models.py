#!/usr/bin/python3
"""Turns torchvision exports (bench/export-torchvision.py) into models small enough to carry to a
lent GPU machine: each initializer of 64 KiB or more moves to ONNX external data
(<arch>.weights, which is NOT written here), and <arch>.fill describes its values instead: one
line per output channel (the tensor's first dimension) with the offset, the count, the mean and
the standard deviation of PyTorch's random weights. bench/fill-weights.c recreates <arch>.weights
from the manifest on any machine (uniform values with those moments, seeded by the offset), so
the CPU and the GPU runs there read the same weights, with the scale per channel that keeps
activations O(1) as in the export. Smaller initializers (biases, shapes) stay in the model.

    /usr/bin/python3 bench/gpu-models.py tv-models gpu-models resnet18 mobilenet_v2 ...
    cc -O2 -o fill-weights bench/fill-weights.c -lm && ./fill-weights gpu-models/*.fill

Needs Debian's python3-onnx (and python3-numpy)."""
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

THRESHOLD = 64 * 1024


def convert(src, dst_dir, stem):
    model = onnx.load(src)
    weights = stem + ".weights"
    offset = 0
    lines = []
    for t in model.graph.initializer:
        if t.data_type != onnx.TensorProto.FLOAT:
            continue
        a = numpy_helper.to_array(t).astype(np.float32)
        if a.nbytes < THRESHOLD:
            continue
        rows = a.reshape(a.shape[0], -1) if a.ndim >= 2 else a.reshape(1, -1)
        row_bytes = rows.shape[1] * 4
        for i, r in enumerate(rows):
            lines.append("%d %d %.9g %.9g" % (offset + i * row_bytes, r.size,
                                              float(r.mean(dtype=np.float64)),
                                              float(r.std(dtype=np.float64))))
        t.ClearField("raw_data")
        t.ClearField("float_data")
        del t.external_data[:]
        for k, v in (("location", weights), ("offset", str(offset)),
                     ("length", str(a.nbytes))):
            e = t.external_data.add()
            e.key, e.value = k, v
        t.data_location = onnx.TensorProto.EXTERNAL
        offset += a.nbytes
    path = os.path.join(dst_dir, stem + ".onnx")
    onnx.save(model, path + ".tmp")
    os.replace(path + ".tmp", path)
    with open(os.path.join(dst_dir, stem + ".fill"), "w") as f:
        f.write("placesim-fill 1 %s %d\n" % (weights, offset))
        f.write("\n".join(lines) + "\n")
    return os.path.getsize(path), offset


def main():
    if len(sys.argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    src_dir, dst_dir, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(dst_dir, exist_ok=True)
    for n in names:
        src = os.path.join(src_dir, n + ".onnx")
        if not os.path.exists(src):
            print("gpu-models: %s: missing (run bench/export-torchvision.py %s)" % (src, n),
                  file=sys.stderr)
            return 2
        size, ext = convert(src, dst_dir, n)
        print("gpu-models: %s: model %d bytes, %d bytes of external weights" % (n, size, ext),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
