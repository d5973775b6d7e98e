#!/usr/bin/env python3
"""The packed GPU check's path switches in one decision table each (scripts/gpu-run.sh).

A new GPU path stays behind its environment switch until a GPU has measured it faster
(docs/cuda.md, "Switches"; issue 46), and gpu-run.sh's benchmark steps run each workload
with the switch at the default and then switched on, one log per step. This reads those
logs and prints, per switch: one row per (workload, metric) with each path's median, each
switched-on path's ratio to the default path, each path's ratio to PyTorch eager where
PyTorch's number is known, and issue 46's target where one applies (W4, W9, W10, W11 and W12's
step <= 0.8 of PyTorch eager; W12's SDPA at T = 1024 and 4096 <= 1.0), met or not. Then a
verdict: a path wins when it is more than 3% faster than the default on the workload's main
metric (the step or epoch time; for the sdpa rows T = 4096) and none of its other timed rows
(the programs' own floor probes aside) is more than 3% slower. 3%: two repetitions on a shared machine do not resolve less.

PyTorch eager: from the log itself where the step ran it (w12_half_attention and
w4_w10_w11_channels_last: the same bf16 autocast), else from the compare step's bench.jsonl (float32, env "default"), never across
precisions. The sdpa_rows_per_block step has no default path in its log (the geometry
chooses the rows a block); the compare step's reel W12 rows are that default when present.

Last, W9's GRU layer from the rnn_probe step (bench/gpu_rnn_probe.cpp and
bench/reference/gru_probe_pytorch.py): forward + backward through cuDNN as reel calls it,
as PyTorch calls it, in its fastest variant, then reel's path and PyTorch's; no verdict,
there is no switch yet, only where the time goes (cuDNN's choice or reel's wrapper).

Usage: python3 bench/gpu_paths.py LOGS_DIR
Exit 0 whatever the logs hold (a summary must not fail a run); 2 when LOGS_DIR is missing.
"""
import json
import math
import os
import re
import statistics
import sys

NOISE = 0.03

# bench_util.h report() and workloads_pytorch.py's report() print the same columns
BENCH = re.compile(r"^(W\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+median\s+(\S+)\s+min\s+(\S+)\s+max\s+(\S+)\s+n\s+(\d+)\s*$")
# the first columns of a bench line: a line that has them but not the rest was cut or garbled
BENCH_START = re.compile(r"^W\d+\s+\S+\s+\S+\s+\S+")
HEADER = re.compile(r"^REEL_[A-Z0-9_]+=\S+(\s+REEL_[A-Z0-9_]+=\S+)*$")
PYTORCH_HEADER = "PyTorch eager"


class Switch:
    def __init__(self, log, name, default, main, torch_in_log=False):
        self.log = log  # the step's log, without .log
        self.name = name  # the variable a verdict names
        self.default = default  # its default value as the log's headers write it (None: not in the log)
        self.main = main  # workload -> its main metric
        self.torch_in_log = torch_in_log  # PyTorch ran in the step, under the same settings


SWITCHES = [
    Switch("w9_cudnn_rnn", "REEL_CUDNN_RNN", "layers", {"W9": "epoch_s"}),
    # fused is the default since the H200's runs of 2026-11-29 (W11 0.80, 0.74, 0.78 of separate)
    Switch("w10_w11_bn_relu", "REEL_CUDA_BN_RELU", "fused", {"W10": "s_per_1000_images", "W11": "step_ms"}),
    Switch("w12_half_attention", "REEL_CUDA_HALF_ATTENTION", "staged", {"W12": "step_ms"}, torch_in_log=True),
    # W7's floor (read_floor_ms, the same program's copy probe) prints beside as a row of its own
    Switch("w7_channel_sums", "REEL_CUDA_CHANNEL_SUMS", "cub", {"W7": "bias_grad_ms"}),
    # under --amp bf16 on both sides: PyTorch eager ran in the step under the same autocast
    Switch("w4_w10_w11_channels_last", "REEL_CUDA_CHANNELS_LAST", "off",
           {"W4": "step_ms", "W10": "s_per_1000_images", "W11": "step_ms"}, torch_in_log=True),
    # no default in the log: the compare step's W12 is it. T = 4096: where the rows a block
    # matter most (the most tiles an SM)
    Switch("sdpa_rows_per_block", "REEL_CUDA_ATTENTION(_ROWS)", None, {"W12": "sdpa_T4096_ms"}),
]


def is_time(metric):
    if metric.endswith("_per_s"):  # a rate (W4's images_per_s): more is better
        return False
    return metric.endswith("_ms") or metric.endswith("_s") or metric.startswith("s_per_")


def target(workload, metric):
    """Issue 46's bound on reel / PyTorch eager, or None."""
    if workload in ("W4", "W9", "W10", "W11") and is_time(metric):
        return 0.8
    if workload == "W12" and metric == "step_ms":
        return 0.8
    if workload == "W12" and metric in ("sdpa_T1024_ms", "sdpa_T4096_ms"):
        return 1.0
    return None


class Section:
    def __init__(self, header):
        self.header = header  # "REEL_X=a REEL_Y=b", as the log wrote it
        self.settings = dict(kv.split("=", 1) for kv in header.split())
        self.label = "-".join(self.settings.values())
        self.rows = {}  # (workload, metric) -> medians


class Log:
    def __init__(self):
        self.sections = []
        self.torch = {}
        self.malformed = []
        self.outside = 0  # bench lines before any header: no path to give them


def bench_line(line):
    """(workload, system, metric, median) of a bench line, None if it is not one, "bad" if garbled."""
    m = BENCH.match(line)
    if not m:
        return "bad" if BENCH_START.match(line) else None
    try:
        values = [float(m.group(i)) for i in (5, 6, 7)]
    except ValueError:
        return "bad"
    if not all(math.isfinite(v) for v in values):
        return "bad"
    return m.group(1), m.group(2), m.group(4), values[0]


def parse_log(path):
    log = Log()
    current = None
    with open(path, errors="replace") as f:
        lines = [line.strip() for line in f]
    for line in lines:
        if HEADER.match(line):  # a header met again (a step run twice) pools into its section
            current = next((s for s in log.sections if s.header == " ".join(line.split())), None)
            if current is None:
                current = Section(" ".join(line.split()))
                log.sections.append(current)
            continue
        if line == PYTORCH_HEADER:
            current = "pytorch"
            continue
        row = bench_line(line)
        if row is None:
            continue
        if row == "bad":
            log.malformed.append(line)
            continue
        workload, system, metric, median = row
        if system == "pytorch" or current == "pytorch":
            if system == "pytorch":  # torch.compile's lines would be another system
                log.torch.setdefault((workload, metric), []).append(median)
        elif current is None:
            log.outside += 1
        else:
            current.rows.setdefault((workload, metric), []).append(median)
    log.last_line = next((line for line in reversed(lines) if line), "")
    return log


def load_compare(path):
    """bench.jsonl's float32 medians: {"pytorch": {...}, "reel": {...}}, and lines it could not read."""
    found = {"pytorch": {}, "reel": {}}
    bad = 0
    if not os.path.isfile(path):
        return found, bad
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                if "meta" in r or r.get("env", "default") != "default" or r.get("system") not in found:
                    continue
                median = float(r["median"])
                key = (r["workload"], r["metric"])
            except (ValueError, KeyError, TypeError, AttributeError):
                bad += 1
                continue
            if math.isfinite(median):
                found[r["system"]].setdefault(key, []).append(median)
    return found, bad


def medians(rows):
    return {k: statistics.median(v) for k, v in rows.items()}


def fmt(v):
    return "-" if v is None else f"{v:.4g}"


def ratio(a, b):
    return a / b if a is not None and b else None


def print_table(header, rows):
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    for r in [header] + rows:
        print("  " + "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())


def ratio_text(r, bound=None):
    if r is None:
        return "-"
    return f"{r:.2f}" + ("" if bound is None else " yes" if r <= bound else " NO")


def tables(paths, torch):
    """paths: [(label, {key: median})], the default first. The switch's table as one or, with
    more than two paths (too wide for a summary), two tables: against the default, then PyTorch."""
    keys = []
    for _, rows in paths:
        keys += [k for k in rows if k not in keys]
    labels = [label for label, _ in paths]
    own = ["row"] + labels + [f"{label}/{labels[0]}" for label in labels[1:]]
    peer = ["pytorch"] + [f"{label}/pt" for label in labels] + ["target"]
    own_rows, peer_rows = [], []
    for k in keys:
        values = [rows.get(k) for _, rows in paths]
        t = torch.get(k)
        bound = target(*k)
        own_rows.append([f"{k[0]} {k[1]}"] + [fmt(v) for v in values]
                        + [ratio_text(ratio(v, values[0])) for v in values[1:]])
        peer_rows.append([fmt(t)] + [ratio_text(ratio(v, t), bound) for v in values]
                         + ["-" if bound is None else f"<= {bound:g}"])
    if len(paths) <= 2:
        return [(own + peer, [a + b for a, b in zip(own_rows, peer_rows)])]
    return [(own, own_rows), (["row"] + peer, [a[:1] + b for a, b in zip(own_rows, peer_rows)])]


def verdict(switch, paths, setting):
    """The verdict line: which path wins, or that the default stays, and why."""
    default_label, default_rows = paths[0]
    default_rows = {k: v for k, v in default_rows.items() if v > 0}  # 0.0000: too fast to print, no ratio
    mains = sorted(switch.main.items())
    if not all(k in default_rows for k in mains):
        return f"{switch.name}: no verdict (the default, {default_label}, has no {mains_text(mains)})"
    wins, reasons = [], []
    for label, rows in paths[1:]:
        missing = [k for k in mains if k not in rows]
        if missing:
            reasons.append(f"{label} has no {mains_text(missing)}")
            continue
        best = min(mains, key=lambda k: rows[k] / default_rows[k])
        gain = rows[best] / default_rows[best]
        # a floor is the program's own probe of the machine, the same whatever the path
        timed = [k for k in rows if is_time(k[1]) and "floor" not in k[1] and k in default_rows]
        worst = max(timed, key=lambda k: rows[k] / default_rows[k])
        loss = rows[worst] / default_rows[worst]
        if gain < 1 - NOISE and loss <= 1 + NOISE:
            wins.append((gain, label, best))
        elif gain < 1 - NOISE:
            reasons.append(f"{label}: {gain:.2f} of the default on {best[0]} {best[1]} "
                           f"but {loss:.2f} on {worst[0]} {worst[1]}")
        else:
            reasons.append(f"{label}: {gain:.2f} of the default on {best[0]} {best[1]}")
    if wins:
        gain, label, best = min(wins)
        return f"{setting[label]} wins ({gain:.2f} of the default on {best[0]} {best[1]})"
    if len(reasons) == len(paths) - 1 and all(" has no " in r for r in reasons):
        return f"{switch.name}: no verdict ({'; '.join(reasons) or 'no other path ran'})"
    return f"{switch.name}: default stays ({'; '.join(reasons)})"


def mains_text(keys):
    return " or ".join(f"{w} {m}" for w, m in keys)


def default_path(switch, log, compare):
    """(label, rows, where) of the default, and the log's other sections."""
    sections = [s for s in log.sections if s.rows]
    if switch.default is not None:
        # the section that sets the default alone, before one that adds another switch to it
        # (W9's "REEL_CUDNN_RNN=layers REEL_CUDA_RNN_ALGO=small_h" is a path, not the default)
        matches = [s for s in sections if s.settings.get(switch.name) == switch.default]
        for s in sorted(matches, key=lambda x: len(x.settings)):
            return (s.label, medians(s.rows), s.header), [x for x in sections if x is not s]
        return None, sections
    chosen = {k: v for k, v in medians(compare["reel"]).items()
              if any(k in s.rows for s in sections)}
    if all(k in chosen for k in switch.main.items()):
        where = "the rows a block the geometry chose: the compare step's W12 in bench.jsonl"
        return ("chosen", chosen, where), sections
    if not sections:
        return None, sections
    first = sections[0]
    return (first.label, medians(first.rows), f"{first.header}, the first section: bench.jsonl has no W12 "
            "of the compare step to set against"), sections[1:]


def report(switch, logs, compare, compare_bad):
    path = os.path.join(logs, switch.log + ".log")
    print(f"---- {switch.name} ({switch.log}.log)")
    if not os.path.isfile(path):
        print(f"  no {switch.log}.log: the step did not run (or its budget was spent before it)")
        return
    log = parse_log(path)
    if not any(s.rows for s in log.sections):
        print(f"  {switch.log}.log holds no benchmark lines under a REEL_... header: nothing to compare "
              f"(its last line: {log.last_line[:160]!a})")
        return
    default, others = default_path(switch, log, compare)
    if default is None:
        print(f"  {switch.log}.log has no section for the default, {switch.name}={switch.default}: nothing to compare")
        return
    label, rows, where = default
    if switch.torch_in_log:
        torch, torch_from = medians(log.torch), "the log, same settings"
    else:
        torch, torch_from = medians(compare["pytorch"]), "bench.jsonl, float32"
    paths = [(label, rows)] + [(s.label, medians(s.rows)) for s in others]
    print(f"  default: {label} ({where}); PyTorch eager from {torch_from}"
          + ("" if any(k in torch for _, r in paths for k in r) else ": none known"))
    for header, out in tables(paths, torch):
        print_table(header, out)
    for line in log.malformed[:3]:
        print(f"  skipped a malformed line: {line[:160]!a}")
    if len(log.malformed) > 3:
        print(f"  skipped {len(log.malformed) - 3} more malformed lines")
    if log.outside:
        print(f"  skipped {log.outside} bench lines before the first REEL_... header")
    for s in log.sections:
        if not s.rows:
            print(f"  {s.header}: no benchmark lines (the step stopped there? the log's last line: "
                  f"{log.last_line[:120]!a})")
    if compare_bad and not switch.torch_in_log:
        print(f"  bench.jsonl: skipped {compare_bad} unreadable line{'s' if compare_bad > 1 else ''}")
    setting = {s.label: s.header for s in others}
    print("  verdict: " + verdict(switch, paths, setting))


def probe_rows(path):
    """rnn_probe.log's rows as {field: value}: cuDNN's timed and refused rows, reel's, PyTorch's."""
    raw, refused, reel, torch = [], 0, [], None
    with open(path, errors="replace") as f:
        for line in f:
            words = line.split()
            if len(words) < 2 or words[0] != "rnn_probe":
                continue
            kv = dict(w.split("=", 1) for w in words[1:] if "=" in w)
            try:
                if words[1].startswith("layout=") and "refused" in kv:
                    refused += 1
                elif words[1].startswith("layout="):
                    kv["us"] = float(kv["total_us"])
                    raw.append(kv)
                elif words[1] == "reel":
                    kv["us"] = float(kv["fwd_bwd_us"])
                    reel.append(kv)
                elif words[1] == "pytorch" and "fwd_bwd_us" in kv:
                    torch = float(kv["fwd_bwd_us"])
            except (KeyError, ValueError):  # a line cut by the step's limit
                continue
    return raw, refused, reel, torch


def probe_report(logs):
    path = os.path.join(logs, "rnn_probe.log")
    print("---- W9's GRU layer, forward + backward (rnn_probe.log)")
    if not os.path.isfile(path):
        print("  no rnn_probe.log: the step did not run (or its budget was spent before it)")
        return
    raw, refused, reel, torch = probe_rows(path)

    def variant(r):
        return f"{r['layout']} {r['algo']} math={r['math']} padded_io={r['padded_io']}"

    mine = next((r for r in raw if r.get("like") == "reel"), None)
    base = mine["us"] if mine else None
    fastest = min((r for r in raw if r.get("math") == "fma"), key=lambda r: r["us"], default=None)
    rows = [("cuDNN as reel calls it", mine)]
    rows += [("cuDNN as PyTorch calls it", next((r for r in raw if r.get("like") == "pytorch"), None))]
    rows += [(f"cuDNN fastest, TF32 off: {variant(fastest)}", fastest)] if fastest else []
    anymath = min(raw, key=lambda r: r["us"], default=None)
    if anymath is not None and anymath is not fastest:
        rows += [(f"cuDNN fastest, TF32 allowed: {variant(anymath)}", anymath)]
    rows += [(f"reel {r.get('input', '?')} path={r.get('path', '?')}", r) for r in reel]
    rows += [("PyTorch nn.GRU batch_first", {"us": torch} if torch is not None else None)]
    print_table(["forward + backward", "us", "/cuDNN as reel calls it"],
                [[label, fmt(r["us"] if r else None), ratio_text(ratio(r["us"], base) if r else None)]
                 for label, r in rows])
    print(f"  {len(raw)} cuDNN combinations timed, {refused} refused")
    if mine and reel:  # W9's form: batch_first
        own = next((r for r in reel if r.get("input") == "batch_first"), reel[0])["us"]
        text = (f"  reading: reel's {own:.0f} us hold {base:.0f} us of cuDNN calls as reel makes them "
                f"(the wrapper: {own - base:.0f} us)")
        if fastest:
            text += f"; the fastest TF32-off variant takes {fastest['us']:.0f} us ({variant(fastest)})"
        print(text)


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("usage: gpu_paths.py LOGS_DIR", file=sys.stderr)
        return 2
    logs = argv[1]
    if not os.path.isdir(logs):
        print(f"gpu_paths.py: {logs}: no such folder", file=sys.stderr)
        return 2
    try:
        compare, compare_bad = load_compare(os.path.join(logs, "bench.jsonl"))
    except OSError as e:
        print(f"bench.jsonl: {e}: no PyTorch numbers from it")
        compare, compare_bad = {"pytorch": {}, "reel": {}}, 0
    print("a/b: a's median over b's (lower is faster); /pt: over PyTorch eager's; yes/NO: issue 46's target met")
    for switch in SWITCHES:
        try:
            report(switch, logs, compare, compare_bad)
        except Exception as e:  # one unreadable log must not hide the others' tables
            print(f"  {switch.log}.log: no table ({type(e).__name__}: {e})")
    try:
        probe_report(logs)
    except Exception as e:  # likewise
        print(f"  rnn_probe.log: no table ({type(e).__name__}: {e})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
