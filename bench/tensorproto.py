"""ONNX TensorProto files written by hand (no onnx package needed), for the bench scripts that
make reference inputs and outputs (export-torchvision.py, tf-reference.py): dims = 1,
data_type = 2, name = 8, raw_data = 9, little-endian raw data; float32 (1) or float64 (11)."""
import os

ONNX_FLOAT, ONNX_DOUBLE = 1, 11


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def tensor_proto(shape, raw, name, data_type=ONNX_FLOAT):
    """The TensorProto of `raw` (little-endian bytes) with this shape and element type."""
    out = bytearray()
    for d in shape:
        out += b"\x08" + varint(int(d))
    out += b"\x10" + varint(data_type)
    nb = name.encode()
    out += b"\x42" + varint(len(nb)) + nb
    out += b"\x4a" + varint(len(raw)) + raw
    return bytes(out)


def write(path, data):
    """Writes under a temporary name, then renames: a file that exists is complete."""
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
