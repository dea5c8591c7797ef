#!/usr/bin/python3
"""Reads what bench/gpu-check.sh left in OUT and prints, per model, how far the GPU output is
from the CPU output of the same placesim build on the same machine (max |gpu - cpu| over
max |cpu|: an error relative to the output's scale, which an element near zero cannot inflate)
and the step times, as a markdown table for docs/perf.md. Exit 1 when a model has no GPU output
or is off by more than BOUND (default 1e-4).

    /usr/bin/python3 bench/gpu-compare.py OUT [BOUND]

Needs python3-onnx and python3-numpy."""
import glob
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t).astype(np.float64)


def step_ms(path):
    try:
        with open(path) as f:
            return json.load(f)["step_time_us"]["median"] / 1000.0
    except (OSError, ValueError, KeyError):
        return None


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = sys.argv[1]
    bound = float(sys.argv[2]) if len(sys.argv) > 2 else 1e-4
    bad = 0
    for group, title in (("tv", "torchvision exports"), ("light", "onnx-light (--feed ramp)")):
        rows = sorted(glob.glob(os.path.join(out, group, "*.cpu.json")))
        if not rows:
            continue
        print("\n%s\n" % title)
        print("| model | CPU:0 step ms | GPU:0 step ms | speed-up | max abs diff | max abs ref |"
              " rel. to scale | within %.0e |" % bound)
        print("|---|---|---|---|---|---|---|---|")
        for cj in rows:
            s = os.path.basename(cj)[:-len(".cpu.json")]
            base = os.path.join(out, group, s)
            cpu_ms, gpu_ms = step_ms(base + ".cpu.json"), step_ms(base + ".gpu.json")
            try:
                a, b = load(base + ".cpu/output_0.pb"), load(base + ".gpu/output_0.pb")
            except OSError:
                err = ""
                if os.path.exists(base + ".gpu.err"):
                    with open(base + ".gpu.err") as f:
                        err = f.read().strip().splitlines()[:1]
                print("| %s | %s | no GPU output | | | | | no: %s |" % (
                    s, "%.2f" % cpu_ms if cpu_ms else "-", " ".join(err)))
                bad += 1
                continue
            diff = float(np.abs(a - b).max()) if a.shape == b.shape else float("inf")
            scale = float(np.abs(a).max())
            rel = diff / scale if scale > 0 else diff
            ok = rel <= bound
            bad += not ok
            print("| %s | %.2f | %.3f | %.1fx | %.3g | %.3g | %.2e | %s |" % (
                s, cpu_ms, gpu_ms, cpu_ms / gpu_ms, diff, scale, rel, "yes" if ok else "NO"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
