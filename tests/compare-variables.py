#!/usr/bin/env python3
# Compares two folders of variables written by `placesim train --save-variables` (ONNX
# TensorProto files with raw_data): for each file of B, the largest |a - b| over the largest |b|.
# Prints one line per variable and the worst; exit 1 when the worst exceeds BOUND (argv[3]),
# or, with --differ, when it does not (a control that must differ). --print FILE.pb prints one.
import sys, os, struct
def varint(b, i):
    r = s = 0
    while True:
        c = b[i]; i += 1; r |= (c & 0x7f) << s; s += 7
        if c < 0x80: return r, i
def tensor(path):
    b = open(path, 'rb').read(); i = 0; raw = None; dt = None
    while i < len(b):
        key, i = varint(b, i); f, w = key >> 3, key & 7
        if w == 0: v, i = varint(b, i)
        elif w == 2:
            n, i = varint(b, i); v = b[i:i + n]; i += n
        elif w == 5: v = b[i:i+4]; i += 4
        elif w == 1: v = b[i:i+8]; i += 8
        if f == 2: dt = v
        if f == 9: raw = v
    fmt = {1: 'f', 11: 'd', 7: 'q'}[dt]
    return struct.unpack('<%d%s' % (len(raw) // struct.calcsize(fmt), fmt), raw)
if sys.argv[1] == '--print':  # compare-variables.py --print FILE.pb: its values, one a line
    print("\n".join(str(v) for v in tensor(sys.argv[2])))
    sys.exit(0)
a, b, bound = sys.argv[1], sys.argv[2], float(sys.argv[3])
differ = len(sys.argv) > 4 and sys.argv[4] == '--differ'
worst = 0
for f in sorted(os.listdir(b)):
    x, y = tensor(os.path.join(a, f)), tensor(os.path.join(b, f))
    assert len(x) == len(y), f
    scale = max(abs(v) for v in y) or 1
    d = max(abs(p - q) for p, q in zip(x, y)) / scale
    worst = max(worst, d)
    print(f"{f}: max |a-b| / max|b| = {d:.3g}")
print("worst", worst)
sys.exit(0 if (worst > bound) == differ else 1)
