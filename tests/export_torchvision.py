#!/usr/bin/python3
"""Exports torchvision architectures (random weights) to ONNX with PyTorch, with an input and
PyTorch's output saved as ONNX TensorProto files, so that `placesim run` can be checked against
real PyTorch exports:

    /usr/bin/python3 tests/export_torchvision.py --out build/torchvision
    for m in resnet18 mobilenet_v2 googlenet densenet121 shufflenet_v2_x1_0 vit_b_16; do
        build/placesim run build/torchvision/$m.onnx --feed input=build/torchvision/${m}_input_0.pb \
            --check build/torchvision/${m}_output_0.pb --rtol 1e-3 --atol 1e-5
    done

The tolerances are those PyTorch's ONNX export tutorial checks an exported model with (rtol 1e-3,
atol 1e-5); `bench/check-models.sh` runs these checks and also compares both float32 outputs with
PyTorch's float64 output.

Needs Debian's python3-torch, python3-torchvision and python3-onnx (run it with /usr/bin/python3).
The exported files are large: write them under build/, never into the repository."""
import argparse
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torchvision

MODELS = ["resnet18", "mobilenet_v2", "googlenet", "densenet121", "shufflenet_v2_x1_0", "vit_b_16"]


def make(name):
    ctor = getattr(torchvision.models, name)
    if name == "googlenet":
        # No auxiliary heads: they only exist in training mode.
        return ctor(weights=None, aux_logits=False, init_weights=True)
    return ctor(weights=None)


def randomize(model):
    """torchvision's initializations leave some outputs trivial (ViT's head is zeros; BatchNorm
    statistics are 0 and 1; features vanish through mobilenet_v2): give every BatchNorm random
    statistics and affine parameters, and zero Linear weights random values, so that the check
    compares non-trivial numbers."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
            elif isinstance(m, torch.nn.Linear) and not m.weight.any():
                m.weight.normal_(0, 0.02)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/torchvision", help="output folder (default build/torchvision)")
    ap.add_argument("--opset", type=int, default=13, help="ONNX opset (default 13)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("models", nargs="*", default=MODELS, help="torchvision model names")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    for name in args.models:
        torch.manual_seed(args.seed)
        model = randomize(make(name)).eval()
        x = torch.randn(1, 3, 224, 224)
        with torch.no_grad():
            y = model(x)
        path = os.path.join(args.out, name + ".onnx")
        torch.onnx.export(model, x, path, input_names=["input"], output_names=["output"],
                          opset_version=args.opset, do_constant_folding=True)
        onnx.checker.check_model(onnx.load(path))
        # A float64 reference too: how far PyTorch's own float32 output is from it bounds what a
        # float32 implementation summing in another order can be expected to match.
        with torch.no_grad():
            y64 = model.double()(x.double())
        for kind, t, dt in (("input", x, np.float32), ("output", y, np.float32),
                            ("output_f64", y64, np.float64)):
            tp = numpy_helper.from_array(t.numpy().astype(dt), kind)
            with open(os.path.join(args.out, "%s_%s_0.pb" % (name, kind)), "wb") as f:
                f.write(tp.SerializeToString())
        err = (y.double() - y64).abs().max().item()
        print("%s: %s, output %s, |max| %.3g, PyTorch float32 vs float64 max abs err %.3g"
              % (name, path, tuple(y.shape), y.abs().max().item(), err), file=sys.stderr)


if __name__ == "__main__":
    main()
