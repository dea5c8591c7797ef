#!/usr/bin/env python3
"""Writes a generated task graph as placesim graph JSON: N Task nodes, node i reading 1 to 3
outputs of the previous 1000 nodes, costs 1 to 100 us on any device, outputs of 1 kB to 1 MB (the
graph bench-placer builds in memory). For the command-line scale checks of issue 15
(bench/cli-scale.sh). Usage: gen-taskgraph.py N [SEED] > graph.json"""
import random
import sys


def main():
    if len(sys.argv) < 2 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.stderr.write("usage: gen-taskgraph.py N [SEED] > graph.json\n")
        return 2
    n = int(sys.argv[1])
    rng = random.Random(int(sys.argv[2]) if len(sys.argv) > 2 else 42)
    out = sys.stdout
    out.write('{"format": "placesim.graph/1", "name": "generated-%d",\n "nodes": [\n' % n)
    for i in range(n):
        inputs = []
        if i:
            for _ in range(rng.randint(1, 3)):
                u = i - rng.randint(1, min(i, 1000))
                if ("t%d:0" % u) not in inputs:
                    inputs.append("t%d:0" % u)
        out.write('  {"name": "t%d", "op": "Task"%s, "outputs": [{"bytes": %d}], "cost_us": {"*": %d}}%s\n'
                  % (i, (', "inputs": [%s]' % ", ".join('"%s"' % x for x in inputs)) if inputs else "",
                     rng.randint(1000, 999999), rng.randint(1, 100), "," if i + 1 < n else ""))
    out.write(" ]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
