#!/usr/bin/python3
"""placesim's gradients (tests/test-graph-grad.c writes each case: the forward graph as placesim
graph JSON, its feeds and placesim's gradients) against PyTorch's autograd in float64. The
forward graph is evaluated op by op in torch, the loss differentiated by every feed, and each
gradient compared to 1e-4 relative (of the gradient's largest element). Exit 0 when all agree."""
import base64
import glob
import json
import os
import struct
import sys

import torch


def const_value(attr):
    t = attr["tensor"]
    shape = t.get("shape", [])
    dt = {"float64": torch.float64, "float32": torch.float32, "int64": torch.int64}[t["dtype"]]
    if "data" in t:
        vals = t["data"]
    else:
        raw = base64.b64decode(t["data_b64"])
        fmt = {"float64": "d", "float32": "f", "int64": "q"}[t["dtype"]]
        vals = list(struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw))
    return torch.tensor(vals, dtype=dt).reshape(shape)


def attr(node, name, default):
    a = node.get("attrs", {}).get(name)
    if a is None:
        return default
    if isinstance(a, dict) and "ints" in a:
        return a["ints"]
    return a


def evaluate(graph, feeds):
    val = {}
    for n in graph["nodes"]:
        op, name = n["op"], n["name"]
        x = []
        for r in n.get("inputs", []):
            src, _, k = r.partition(":")
            v = val[src]
            x.append(v[int(k or 0)] if isinstance(v, tuple) else v)
        if op == "Placeholder":
            y = feeds[name]
        elif op in ("Const", "Constant"):
            y = const_value(n["attrs"]["value"])
        elif op in ("Add", "Sub", "Mul", "Div"):
            y = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op](x[0], x[1])
        elif op in ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg"):
            y = getattr(torch, op.lower())(x[0])
        elif op == "Identity":
            y = x[0]
        elif op == "MatMul":
            y = x[0] @ x[1]
        elif op == "Gemm":
            a = x[0].t() if attr(n, "transA", 0) else x[0]
            b = x[1].t() if attr(n, "transB", 0) else x[1]
            y = attr(n, "alpha", 1.0) * (a @ b)
            if len(x) > 2:
                y = y + attr(n, "beta", 1.0) * x[2]
        elif op == "Transpose":
            perm = attr(n, "perm", None)
            y = x[0].permute(*perm) if perm else x[0].permute(*reversed(range(x[0].dim())))
        elif op == "Flatten":
            ax = attr(n, "axis", 1)
            y = x[0].reshape(int(torch.tensor(x[0].shape[:ax]).prod()), -1)
        elif op in ("ReduceSum", "ReduceMean"):
            axes = attr(n, "axes", None)
            keep = bool(attr(n, "keepdims", 1))
            f = torch.sum if op == "ReduceSum" else torch.mean
            y = f(x[0], dim=tuple(axes), keepdim=keep) if axes else f(x[0])
            if axes is None and keep:
                y = y.reshape([1] * x[0].dim())
        elif op == "Conv":
            pads = attr(n, "pads", [0, 0, 0, 0])
            xin = torch.nn.functional.pad(x[0], (pads[1], pads[3], pads[0], pads[2]))
            y = torch.nn.functional.conv2d(xin, x[1], x[2] if len(x) > 2 else None,
                                           stride=attr(n, "strides", [1, 1]),
                                           dilation=attr(n, "dilations", [1, 1]), groups=attr(n, "group", 1))
        elif op in ("MaxPool", "AveragePool"):
            k, pads = attr(n, "kernel_shape", None), attr(n, "pads", [0, 0, 0, 0])
            assert pads[0] == pads[2] and pads[1] == pads[3], "symmetric pads only here"
            if op == "MaxPool":
                y = torch.nn.functional.max_pool2d(x[0], k, stride=attr(n, "strides", [1, 1]),
                                                   padding=pads[:2])
            else:
                y = torch.nn.functional.avg_pool2d(x[0], k, stride=attr(n, "strides", [1, 1]), padding=pads[:2],
                                                   count_include_pad=bool(attr(n, "count_include_pad", 0)))
        elif op == "BatchNormalization":
            y = torch.nn.functional.batch_norm(x[0], x[3].clone(), x[4].clone(), x[1], x[2],
                                               training=bool(attr(n, "training_mode", 0)),
                                               momentum=1 - attr(n, "momentum", 0.9), eps=attr(n, "epsilon", 1e-5))
        elif op == "Clip":
            y = torch.clamp(x[0], min=attr(n, "min", None), max=attr(n, "max", None))
        elif op == "Concat":
            y = torch.cat(x, dim=attr(n, "axis", 0))
        elif op == "Split":
            ax = attr(n, "axis", 0)
            sizes = attr(n, "split", None)
            outs = len(n.get("outputs", [])) or 1
            y = tuple(torch.split(x[0], sizes if sizes else x[0].shape[ax] // outs, dim=ax))
        elif op == "Slice":
            y = x[0]
            for st, en, ax in zip(attr(n, "starts", []), attr(n, "ends", []),
                                  attr(n, "axes", list(range(len(attr(n, "starts", [])))))):
                dim = y.shape[ax]
                st = max(st + dim, 0) if st < 0 else min(st, dim)
                en = max(en + dim, 0) if en < 0 else min(en, dim)
                y = y.narrow(ax, st, max(en - st, 0))
        elif op == "GlobalAveragePool":
            y = x[0].mean(dim=(2, 3), keepdim=True)
        elif op == "Softmax":
            y = torch.softmax(x[0], dim=attr(n, "axis", -1))
        elif op == "SoftmaxCrossEntropyLoss":
            y = torch.nn.functional.cross_entropy(x[0], x[1], reduction=attr(n, "reduction", "mean"))
        else:
            raise SystemExit("grad-torch.py: op %s of node %s is not known here" % (op, name))
        val[name] = y
    return val


def main():
    files = sorted(glob.glob(os.path.join(sys.argv[1], "case-*.json")))
    if not files:
        raise SystemExit("grad-torch.py: no cases in %s" % sys.argv[1])
    worst = 0.0
    for f in files:
        case = json.load(open(f))
        feeds = {k: torch.tensor(v["data"], dtype=torch.float64).reshape(v["shape"]).requires_grad_()
                 for k, v in case["feeds"].items()}
        loss = evaluate(case["graph"], feeds)[case["loss"]]
        loss.sum().backward()
        for k, v in case["grads"].items():
            ours = torch.tensor(v["data"], dtype=torch.float64).reshape(v["shape"])
            ref = feeds[k].grad
            scale = max(float(ref.abs().max()), 1e-12)
            err = float((ours - ref).abs().max()) / scale
            worst = max(worst, err)
            if err > 1e-4:
                raise SystemExit("%s (%s): d loss / d %s differs from PyTorch's by %.3g of its scale"
                                 % (os.path.basename(f), case["graph"]["name"], k, err))
    print("%d cases agree with PyTorch's autograd (float64): largest difference %.2g of the gradient's scale"
          % (len(files), worst))


main()
