#!/usr/bin/python3
"""W14's verdict table from compare.py runs (JSON lines): reel's samples pooled over the
runs, the best peer (median) over every system and environment in them, the floors
pooled likewise. Targets: reel/peer <= 0.8 and reel/floor <= 1.5 (a ✗ marks a miss).

    /usr/bin/python3 bench/w14_table.py RUN.jsonl [RUN2.jsonl ...]
A run made with --python set to a PyTorch 2.x is recognised by its meta line.
"""
import json
import statistics
import sys

OPS = ["exp", "log", "tanh", "sigmoid", "gelu", "gelu_tanh", "erf", "softplus", "silu"]


def main(files):
    reel, peers = {}, {}
    for f in files:
        torch = "1.13"
        for line in open(f):
            d = json.loads(line)
            if "meta" in d:
                torch = "2.x" if "venv" in d["meta"].get("python", "") else "1.13"
                continue
            if d.get("workload") != "W14":
                continue
            m = d["metric"]
            if d["system"] == "reel":
                reel.setdefault(m, []).extend(d["samples"])
                continue
            name = d["system"] + (" " + torch if d["system"] == "pytorch" else "") + "/" + d["env"]
            peers.setdefault(m, {}).setdefault(name, []).extend(d["samples"])
    med = statistics.median
    floor = {"fwd": med(reel["floor_fwd_ms"]), "bwd": med(reel["floor_bwd_ms"])}
    print("floors (ms): forward %.3f, backward %.3f" % (floor["fwd"], floor["bwd"]))
    print()
    print("| op | fwd: reel ms | best peer (which) | reel/peer | reel/floor "
          "| bwd: reel ms | best peer (which) | reel/peer | reel/floor |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for op in OPS:
        row = [op]
        for way in ("fwd", "bwd"):
            m = "%s_%s_ms" % (op, way)
            r = med(reel[m])
            best_ms, best = min((med(v), k) for k, v in peers[m].items())
            rp, rf = r / best_ms, r / floor[way]
            row += ["%.3f" % r, "%.3f (%s)" % (best_ms, best), "%.2f%s" % (rp, "" if rp <= 0.8 else " ✗"),
                    "%.2f%s" % (rf, "" if rf <= 1.5 else " ✗")]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
