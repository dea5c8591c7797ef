#!/usr/bin/python3
"""placesim against ONNX Runtime and PyTorch on one core (issue 19): for each torchvision export
of bench/export-torchvision.py (random weights, its own N(0, 1) input), in one run, the three
pinned to the same core, interleaved in ROUNDS rounds of STEPS timed steps after a warm-up:

  placesim   build/placesim run MODEL --steps STEPS --feed input=MODEL_input_0.pb --save-outputs
  ORT        bench/ort-time.py MODEL STEPS --input MODEL_input_0.pb --save OUT.pb (PyPI
             onnxruntime in a virtual environment: one intra-op and one inter-op thread)
  PyTorch    the same architecture rebuilt with the export's seed, torch.set_num_threads(1)

and prints a markdown table: medians over rounds of each side's median step, placesim / ORT,
and placesim's largest difference from ORT's output relative to the output's scale. The
geometric mean of the ratios closes the table.

    /usr/bin/python3 bench/ort-compare.py --venv /tmp/ortvenv [--core 1] [--rounds 3]
        [--steps 5] [MODEL...]          (default: issue 19's twelve, from tv-models/)

Needs Debian's python3-torch, python3-torchvision and python3-onnx, and a virtual environment
with onnxruntime (pip install onnxruntime)."""
import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_1", "googlenet", "shufflenet_v2_x1_0",
          "densenet121", "efficientnet_b0", "mnasnet1_0", "convnext_tiny", "regnet_y_400mf",
          "resnext50_32x4d", "alexnet"]

HERE = os.path.dirname(os.path.abspath(__file__))


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def placesim_ms(args, model, inp, out_dir):
    cmd = ["taskset", "-c", str(args.core), args.placesim, "run", model, "--steps", str(args.steps),
           "--feed", "input=" + inp, "--save-outputs", out_dir, "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["step_time_us"]["median"] / 1e3


def ort_ms(args, model, inp, out_pb):
    cmd = ["taskset", "-c", str(args.core), os.path.join(args.venv, "bin", "python"),
           os.path.join(HERE, "ort-time.py"), model, str(args.steps), "--input", inp, "--save", out_pb]
    r = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(r.stdout)["wall_ms"]


def torch_ms(args, name, x):
    import torch
    spec = importlib.util.spec_from_file_location("export_tv", os.path.join(HERE, "export-torchvision.py"))
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    torch.set_num_threads(1)
    os.sched_setaffinity(0, {args.core})
    torch.manual_seed(args.seed)
    model = ex.randomize(ex.make(name), name)
    t = torch.from_numpy(x)
    with torch.no_grad():
        model(t)
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            model(t)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", required=True, help="virtual environment with onnxruntime")
    ap.add_argument("--placesim", default="build/placesim")
    ap.add_argument("--models-dir", default="tv-models")
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0, help="the export's seed (export-torchvision.py --seed)")
    ap.add_argument("models", nargs="*", default=MODELS)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models:
            model = os.path.join(args.models_dir, name + ".onnx")
            inp = os.path.join(args.models_dir, name + "_input_0.pb")
            if not os.path.exists(model) or not os.path.exists(inp):
                print("ort-compare: %s missing (bench/export-torchvision.py %s)" % (model, name), file=sys.stderr)
                return 2
            x = load_pb(inp)
            ps, ot, pt = [], [], []
            for _ in range(args.rounds):
                ps.append(placesim_ms(args, model, inp, os.path.join(tmp, name)))
                ot.append(ort_ms(args, model, inp, os.path.join(tmp, name + "_ort.pb")))
                pt.append(torch_ms(args, name, x))
            a = load_pb(os.path.join(tmp, name, "output_0.pb")).astype(np.float64)
            b = load_pb(os.path.join(tmp, name + "_ort.pb")).astype(np.float64)
            diff = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))
            p, o, t = statistics.median(ps), statistics.median(ot), statistics.median(pt)
            rows.append((name, p, o, t, p / o, diff))
            print("ort-compare: %s placesim %.2f ms, ORT %.2f ms, PyTorch %.2f ms" % (name, p, o, t),
                  file=sys.stderr)
    print("| model | placesim ms | ORT ms | PyTorch ms | placesim / ORT | max diff from ORT / scale |")
    print("|---|---|---|---|---|---|")
    for name, p, o, t, r, d in rows:
        print("| %s | %.2f | %.2f | %.2f | %.2fx | %.1e |" % (name, p, o, t, r, d))
    gm = math.exp(sum(math.log(r[4]) for r in rows) / len(rows))
    print("\ngeometric mean placesim / ORT: %.2fx over %d models" % (gm, len(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
