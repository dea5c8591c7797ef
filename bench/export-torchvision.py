#!/usr/bin/python3
"""Exports torchvision architectures with random weights to ONNX: placesim's held-out set (issue
14), models no constant of the cost model was ever fitted to. Beside each <arch>.onnx it writes
the input it fed PyTorch and PyTorch's outputs as ONNX TensorProto files, so that `placesim run`
can be checked against PyTorch:

    /usr/bin/python3 bench/export-torchvision.py                 # every architecture, ./tv-models
    build/placesim run tv-models/resnet18.onnx --feed input=tv-models/resnet18_input_0.pb \\
        --check tv-models/resnet18_output_0.pb --rtol 1e-3 --atol 1e-5
    bash bench/check-models.sh build 3                           # all of them, max errors

Beyond the default set, any torchvision classifier, video model (torchvision.models.video: input
1x3x8x112x112, s3d 1x3x16x224x224) or segmentation model (torchvision.models.segmentation: its
"out" tensor) can be named on the command line.

Files per architecture: <arch>.onnx (batch 1, 3x224x224, 3x299x299 for inception_v3; opset 13;
BatchNorm folded by PyTorch's constant folding), <arch>_input_0.pb (N(0,1), float32),
<arch>_output_0.pb (PyTorch's float32 output) and <arch>_output_f64_0.pb (the same model run in
float64: how far PyTorch's own float32 output is from it bounds what a float32 implementation
summing in another order can be expected to match). The input is named "input", the output
"output"; the graph is named torch_jit, and placesim names it by the file's stem.

Weights are random (weights=None, torch.manual_seed(SEED) before each model is built); BatchNorm
affine parameters are random too, and its running statistics are those of one random N(0,1)
batch, so that activations stay O(1) through every layer as in a trained net. Nothing is fitted
to anything and nothing is downloaded. An architecture that fails to build, run or export is reported
on stderr with the reason and the script exits 1 (with --keep-going, after the others).

Needs Debian's python3-torch and python3-torchvision (bench/tv-setup.sh installs them); run it
with /usr/bin/python3. The python3-onnx package is optional: with it, each file is also checked
with onnx.checker. The files are large (about 1.7 GB for the default set): keep them out of git
(tv-models/ is ignored)."""
import argparse
import os
import sys
import time
import traceback

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensorproto  # noqa: E402  (bench/tensorproto.py)

# One or more per family the issue names; see docs/validation.md, "Held-out set".
MODELS = [
    "resnet18", "resnet50", "vgg11",                                  # plain CNNs, residual
    "mobilenet_v2", "mobilenet_v3_small", "shufflenet_v2_x1_0", "mnasnet0_5",  # depthwise
    "efficientnet_b0", "regnet_y_400mf",                              # squeeze-excite
    "googlenet", "inception_v3",                                      # inception
    "densenet121", "squeezenet1_1",                                   # dense, fire modules
    "vit_b_16", "convnext_tiny",                                      # transformer, modern CNN
]

ONNX_FLOAT, ONNX_DOUBLE = tensorproto.ONNX_FLOAT, tensorproto.ONNX_DOUBLE


# Families beyond image classification: video (5-D input, N x C x T x H x W) and segmentation
# (a dict output whose "out" is exported). Any other torchvision constructor is tried as an
# image classifier.
FAMILIES = ("video", "segmentation")


def ctor_of(name):
    for mod in [torchvision.models] + [getattr(torchvision.models, f, None) for f in FAMILIES]:
        c = getattr(mod, name, None) if mod is not None else None
        if callable(c) and not isinstance(c, type(torchvision)):
            return c, mod
    return None, None


def make(name):
    ctor, mod = ctor_of(name)
    if name in ("googlenet", "inception_v3"):
        # No auxiliary heads (they only run in training mode), and torchvision's own init rather
        # than the deprecated default that warns.
        return ctor(weights=None, aux_logits=False, init_weights=True)
    if mod is getattr(torchvision.models, "segmentation", None):
        kw = {"weights": None, "weights_backbone": None}
        if not name.startswith("lraspp"):
            kw["aux_loss"] = False
        return Out(ctor(**kw))
    return ctor(weights=None)


class Out(torch.nn.Module):
    """A segmentation model's "out" tensor (torchvision returns a dict)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        return self.m(x)["out"]


def input_size(name):
    return 299 if name == "inception_v3" else 224


def input_shape(name, batch=1):
    """N x C x H x W, or N x C x T x H x W for video models (s3d needs 224 x 224 frames; the
    others take 8 frames of 112 x 112, as torchvision's video models are trained)."""
    _, mod = ctor_of(name)
    if mod is getattr(torchvision.models, "video", None):
        return (batch, 3, 16, 224, 224) if name == "s3d" else (batch, 3, 8, 112, 112)
    s = input_size(name)
    return (batch, 3, s, s)


def randomize(model, name):
    """torchvision's initializations leave BatchNorm statistics at 0 and 1 and some outputs
    trivial (ViT's head is zeros), so activations vanish or explode through deep nets (1e14 out
    of inception_v3), unlike a trained net's, and a kernel's time can depend on the values. Give
    every BatchNorm random affine parameters and the running statistics of one random N(0,1)
    batch (as a trained net's are those of its data), and zero Linear weights random values."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.1)
                m.reset_running_stats()
                m.momentum = None  # a cumulative average: after one batch, that batch's stats
            elif isinstance(m, torch.nn.Linear) and not m.weight.any():
                m.weight.normal_(0, 0.02)
        model.train()
        model(torch.randn(*input_shape(name, 4)))
    return model.eval()


def tensor_proto(t, name, dtype):
    """An ONNX TensorProto of a torch tensor (bench/tensorproto.py writes it)."""
    t = t.detach().contiguous().to(dtype).cpu()
    f64 = dtype == torch.float64
    raw = t.numpy().astype("<f8" if f64 else "<f4").tobytes()
    return tensorproto.tensor_proto(t.shape, raw, name, ONNX_DOUBLE if f64 else ONNX_FLOAT)


write = tensorproto.write


def files(out, name):
    return [os.path.join(out, name + s) for s in
            (".onnx", "_input_0.pb", "_output_0.pb", "_output_f64_0.pb")]


def export(name, args, onnx):
    torch.manual_seed(args.seed)
    model = randomize(make(name), name)
    x = torch.randn(*input_shape(name))
    with torch.no_grad():
        y = model(x)
    path, pin, pout, pout64 = files(args.out, name)
    tmp = path + ".tmp"
    torch.onnx.export(model, x, tmp, input_names=["input"], output_names=["output"],
                      opset_version=args.opset, do_constant_folding=True)
    if onnx is not None:
        onnx.checker.check_model(tmp)
    with torch.no_grad():
        y64 = model.double()(x.double())
    write(pin, tensor_proto(x, "input", torch.float32))
    write(pout, tensor_proto(y, "output", torch.float32))
    write(pout64, tensor_proto(y64, "output", torch.float64))
    # The model last: a complete .onnx means its .pb files are there too (--skip-existing).
    os.replace(tmp, path)
    err = (y.double() - y64).abs().max().item()
    return "%s, input %s, output %s, |max| %.3g, PyTorch float32 vs float64 max abs err %.3g" % (
        path, tuple(x.shape), tuple(y.shape), y.abs().max().item(), err)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tv-models", help="output folder (default tv-models)")
    ap.add_argument("--opset", type=int, default=13, help="ONNX opset (default 13)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for weights and input (0)")
    ap.add_argument("--skip-existing", action="store_true",
                    help="leave architectures whose four files are all there")
    ap.add_argument("--keep-going", action="store_true",
                    help="export the others when one fails (still exit 1)")
    ap.add_argument("--list", action="store_true", help="print the default architectures")
    ap.add_argument("models", nargs="*", default=MODELS,
                    help="torchvision architectures (default: the %d above)" % len(MODELS))
    args = ap.parse_args()
    if args.list:
        print("\n".join(MODELS))
        return 0
    for name in args.models:
        if ctor_of(name)[0] is None:
            print("export-torchvision: %s: not a torchvision %s model" % (name, torchvision.__version__),
                  file=sys.stderr)
            return 2
    try:
        import onnx
        import onnx.checker
    except ImportError:
        onnx = None
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    failed = []
    for name in args.models:
        if args.skip_existing and all(os.path.exists(f) for f in files(args.out, name)):
            print("%s: present" % name, file=sys.stderr)
            continue
        t0 = time.time()
        try:
            msg = export(name, args, onnx)
        except Exception as e:  # any failure of torchvision, PyTorch or the exporter
            print("%s: FAILED: %s: %s" % (name, type(e).__name__, e), file=sys.stderr)
            traceback.print_exc(limit=3, file=sys.stderr)
            failed.append(name)
            if not args.keep_going:
                break
            continue
        print("%s: %s (%.1f s)" % (name, msg, time.time() - t0), file=sys.stderr)
    if failed:
        print("export-torchvision: failed: %s" % " ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
