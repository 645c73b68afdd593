#!/usr/bin/env python3
"""The table of record of docs/performance.md, from the benchmarks' JSON.

Every benchmark writes its rows with `--json FILE` (bench/BenchRecord.h).
The files of record live in bench/results/; this script turns them into the
Markdown between the `<!-- table-of-record: begin -->` and `end` markers of
docs/performance.md, so that no figure there is typed by hand.

  table-of-record.py [--results DIR] [--doc FILE] --write   rewrite the table
  table-of-record.py [--results DIR] [--doc FILE] --check   exit 1 when the
                                                            page differs
  table-of-record.py [--results DIR]                        print the table
"""
import argparse
import glob
import json
import os
import sys

BEGIN = "<!-- table-of-record: begin -->"
END = "<!-- table-of-record: end -->"
WORKLOADS = {"a": "(a) sin", "b": "(b) triangular", "c": "(c) spring"}
QD_CPU = "qd-cpu (LLVM JIT) "


def size(n):
    return f"2^{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


def ms(v):
    if v is None:
        return "-"
    return f"{v:.3f}" if v < 1 else f"{v:.2f}" if v < 100 else f"{v:.0f}"


def ratio(a, b):
    return f"{a / b:.2f}x" if a is not None and b else "-"


def source(run):
    load = f", load average {run['load']:.1f}" if "load" in run else ""
    return f"{run['machine']}{load}; {run['date']}; `{run['command']}`"


def gradients_table(run):
    """qd-cpu in each shape against the hand-written vectorised loop."""
    rows = run["rows"]
    shapes = [s for s in ("fields", "ndarray", "ndarray-n")
              if any(r.get("shape") == s for r in rows)]
    threads = sorted({r["threads"] for r in rows if "shape" in r}, reverse=True)
    head = ["workload", "thr"] + [f"qd {s}" for s in shapes] + ["vectorised by hand",
                                                                f"qd {shapes[0]}/vectorised"]
    head += [f"{s}/{shapes[0]}" for s in shapes[1:]]
    out = [f"**CPU gradients, ms** ({source(run)})", "", "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
    for key in WORKLOADS:
        for t in threads:
            def grad(impl):
                hit = [r.get("grad_ms") for r in rows
                       if r["workload"] == key and r["threads"] == t and r["impl"] == impl]
                return hit[0] if hit else None
            qd = [grad(QD_CPU + s) for s in shapes]
            if all(v is None for v in qd):
                continue
            vec = grad("hand-written vectorised")
            n = next(r["n"] for r in rows if r["workload"] == key)
            cells = [f"{WORKLOADS[key]} {size(n)}", str(t)] + [ms(v) for v in qd]
            cells += [ms(vec), ratio(qd[0], vec)] + [ratio(v, qd[0]) for v in qd[1:]]
            out.append("| " + " | ".join(cells) + " |")
    return out


def cpu_peers_table(run):
    """Every other implementation of the full run, against qd's fields gradient
    at the same thread count (or at the run's thread count)."""
    rows = run["rows"]
    others = [r for r in rows if "shape" not in r and r.get("grad_ms") is not None
              and r["impl"] != "hand-written vectorised"]
    if not others:
        return []
    out = ["**CPU gradients against the peers, ms** (same run; the ratio is the peer's time "
           "over qd's fields gradient at the same thread count, or at the run's where qd did "
           "not run at the peer's; ADOL-C and the interpreter run a subset and are scaled)", "",
           "| workload | implementation | thr | grad ms | peer/qd |", "|---|---|---|---|---|"]
    most = max(r["threads"] for r in rows if "shape" in r)
    for r in others:
        qd = {q["threads"]: q["grad_ms"] for q in rows
              if q["workload"] == r["workload"] and q.get("shape") == "fields"}
        qd_ms = qd.get(r["threads"], qd.get(most))
        out.append(f"| {WORKLOADS[r['workload']]} {size(r['n'])} | {r['impl']} | "
                   f"{r['threads'] or '-'} | {ms(r['grad_ms'])} | {ratio(r['grad_ms'], qd_ms)} |")
    return out


def gpu_table(run):
    """Kernel (or launch) time per backend and shape, with the peers."""
    rows = run["rows"]
    qd = [r for r in rows if r["impl"].startswith("qd-") and "workload" in r]
    backends = list(dict.fromkeys(r["impl"] for r in qd))
    shapes = list(dict.fromkeys(r["shape"] for r in qd))
    peers = [p for p in ("local_tape", "jax", "torch_eager")
             if any(r["impl"] == p for r in rows)]
    head = ["workload"]
    for b in backends:
        head += [f"{b} {s}" for s in shapes]
    head += peers
    out = [f"**GPU gradients, median kernel ms (launch ms where kernels are not timed)** "
           f"({source(run)})", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key, n in dict.fromkeys((r["workload"], r["n"]) for r in qd):
        cells = [f"{WORKLOADS[key]} {size(n)}"]
        for b in backends:
            base = None
            for i, s in enumerate(shapes):
                hit = [r for r in qd if (r["workload"], r["n"], r["impl"], r["shape"]) ==
                       (key, n, b, s)]
                t = hit[0].get("kernel_ms", hit[0]["grad_ms"]) if hit else None
                if i == 0:
                    base = t
                cells.append(ms(t) if t is None or i == 0 else f"{ms(t)} ({ratio(t, base)})")
        for p in peers:
            hit = [r["grad_ms"] for r in rows if (r.get("workload"), r.get("n"), r["impl"]) ==
                   (key, n, p)]
            cells.append(ms(hit[0]) if hit else "-")
        out.append("| " + " | ".join(cells) + " |")
    return out


def compile_table(run):
    """The mpm series: many tasks, the first gradient launch."""
    rows = [r for r in run["rows"] if r.get("series") == "mpm"]
    if not rows:
        return []
    keys = ["steps", "tasks", "functions", "verify_ms", "reverse_ms", "sizing_ms", "emit_ms",
            "opt_ms", "mc_ms", "first_launch_ms"]
    keys = [k for k in keys if any(k in r for r in rows)]
    out = [f"**Compile time of the mpm series, ms** ({source(run)})", "",
           "| " + " | ".join(k.replace("_ms", "") for k in keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        out.append("| " + " | ".join(str(r[k]) if isinstance(r.get(k), int) else ms(r.get(k))
                                     for k in keys) + " |")
    return out


def table(results):
    runs = []
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        with open(path) as f:
            runs.append(json.load(f))
    makers = {"gradients": [gradients_table, cpu_peers_table], "gpu": [gpu_table],
              "compile": [compile_table]}
    parts = []
    for run in runs:
        for make in makers.get(run["bench"], []):
            lines = make(run)
            if lines:
                parts.append("\n".join(lines))
    note = ("Generated by `bench/table-of-record.py --write` from the files in "
            "`bench/results/` (each benchmark's `--json` output); do not edit by hand.")
    return "\n\n".join([note] + parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap.add_argument("--results", default=os.path.join(root, "bench", "results"))
    ap.add_argument("--doc", default=os.path.join(root, "docs", "performance.md"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = ap.parse_args()
    body = table(args.results)
    if not (args.write or args.check):
        print(body)
        return 0
    with open(args.doc) as f:
        text = f.read()
    if BEGIN not in text or END not in text:
        print(f"{args.doc}: no '{BEGIN}' ... '{END}' markers", file=sys.stderr)
        return 1
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{body}\n{END}{tail}"
    if args.check:
        if new != text:
            print(f"{args.doc}: the table of record differs from bench/results/ "
                  "(run bench/table-of-record.py --write)", file=sys.stderr)
            return 1
        print("the table of record matches bench/results/")
        return 0
    with open(args.doc, "w") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
