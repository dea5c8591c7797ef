#!/usr/bin/env python3
"""Writes a chain of N Relu ops on one float32 tensor of KIB KiB as placesim graph JSON: the
simplest graph whose round-robin plan crosses cores at every op (issue 14, docs/validation.md:
"a chain taking turns"). Usage: gen-chain.py KIB [N] > chain.json"""
import json
import sys


def main():
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1 or (
            len(sys.argv) > 2 and (not sys.argv[2].isdigit() or int(sys.argv[2]) < 1)):
        sys.stderr.write("usage: gen-chain.py KIB [N] > chain.json\n")
        return 2
    kib = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    nodes = [{"name": "x", "op": "Placeholder", "outputs": [{"dtype": "float32", "shape": [kib * 256]}]}]
    prev = "x:0"
    for i in range(n):
        nodes.append({"name": "r%d" % i, "op": "Relu", "inputs": [prev]})
        prev = "r%d:0" % i
    json.dump({"format": "placesim.graph/1", "name": "chain%d" % kib, "nodes": nodes}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
