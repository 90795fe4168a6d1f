"""Nsight Compute's per-instruction counters of one kernel, summed per source line of the kernel's
own file (inlined helpers counted at the kernel line that calls them), and optionally per step.

ncu's own CUDA-source view attributes an inlined helper's instructions to the helper's file, and its
SASS view has no lines; this joins the SASS view (taken on the GPU machine) with the line table of a
local compile of the same source (the GPU machine's nvcc gives the same code as this machine's for
sm_90a: the addresses match, session 39; the script checks the opcodes).

On the GPU machine (one --then of scripts/gpu-check):
    ncu --clock-control none -k regex:KERNEL -c 1 --section SourceCounters --section WarpStateStats \
        -o /tmp/p python3 scripts/profile_cases.py [bwd] CASE >/dev/null &&
    ncu -i /tmp/p.ncu-rep --page source --csv --print-source sass | gzip > $OUT/ncu-sass.csv.gz
Here, a cubin of the same instantiation with line info (a .cu that includes the kernel's header and
instantiates it explicitly, as the profiled call dispatched it):
    nvcc -std=c++17 -O3 -arch=sm_90a -cubin -lineinfo --expt-relaxed-constexpr \
        -DCAUSALCONV_HAS_SM90A=1 -DCAUSALCONV_SM90A=1 -Iinclude -Isrc -o /tmp/k.cubin /tmp/k.cu
    python3 scripts/ncu_lines.py ncu-sass.csv.gz /tmp/k.cubin b2b_backward_wgmma_kernel.cuh \
        [--per N] [--steps 268:prologue,285:tile-top,...] [--top N]

--per N divides the executed counts (e.g. by warps x tiles, for instructions per warp and tile).
--steps LINE:NAME,... names the lines below each LINE (ascending) as one step of the kernel.
"""

import argparse
import collections
import csv
import glob
import gzip
import importlib.util
import os
import re
import shutil
import subprocess
import sys

from ncu_source_summary import number, opcode  # (scripts/, beside this file)


def cuda_tool(name):
    """A CUDA binary tool (nvdisasm, cuobjdump) from PATH, CUDA_HOME, the copy that ships with Triton or
    NVIDIA's pip packages (`pip install nvidia-cuda-cuobjdump`; this machine's toolkit has neither)."""
    found = shutil.which(name)
    if found:
        return found
    candidates = [os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", name)]
    triton = importlib.util.find_spec("triton")
    if triton and triton.origin:
        candidates.append(os.path.join(os.path.dirname(triton.origin), "backends", "nvidia", "bin", name))
    # NVIDIA's pip packages (e.g. nvidia-cuda-cuobjdump) put theirs under site-packages/nvidia/cu*/bin.
    nvidia = importlib.util.find_spec("nvidia")
    for root in (nvidia.submodule_search_locations or []) if nvidia else []:
        candidates += sorted(glob.glob(os.path.join(root, "cu*", "bin", name)), reverse=True)
    for path in candidates:
        if os.path.exists(path):
            return path
    sys.exit(f"no {name} on PATH, in CUDA_HOME/bin or in Triton's package")


def line_table(cubin, kernel_file):
    """{address: (line or label, opcode)}: the outermost line of kernel_file in each inlining chain."""
    text = subprocess.run([cuda_tool("nvdisasm"), "-gi", "-c", cubin], check=True, capture_output=True, text=True).stdout
    table, current = {}, "?"
    for line in text.splitlines():
        if line.lstrip().startswith("//## File"):
            refs = re.findall(r'"([^"]+)", line (\d+)', line)
            own = [int(n) for f, n in refs if os.path.basename(f) == kernel_file]
            current = own[-1] if own else f"{os.path.basename(refs[-1][0])}:{refs[-1][1]}" if refs else "?"
            continue
        match = re.match(r"\s+/\*([0-9a-f]+)\*/\s+(.*?);", line)
        if match:
            table[int(match.group(1), 16)] = (current, opcode(match.group(2)))
    return table


def read_sass_csv(path):
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        rows = [r for r in csv.reader(f) if r]
    start = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if start is None:
        sys.exit(f"ncu_lines: no SASS table (Address and Source columns) in {path}")
    header = rows[start]
    return header, [r for r in rows[start + 1:] if len(r) == len(header)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv")
    parser.add_argument("cubin")
    parser.add_argument("kernel_file", help="the kernel's source file name, e.g. b2b_backward_wgmma_kernel.cuh")
    parser.add_argument("--per", type=float, default=1.0)
    parser.add_argument("--steps", default="")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()

    table = line_table(args.cubin, args.kernel_file)
    header, body = read_sass_csv(args.csv)
    col = {name: i for i, name in enumerate(header)}
    address, source, executed = col["Address"], col["Source"], col["Instructions Executed"]
    samples = next(i for i, n in enumerate(header) if "Stall Sampling" in n and "All" in n)
    reasons = [(i, n[len("stall_"):]) for i, n in enumerate(header) if n.startswith("stall_") and "Not Issued" not in n]

    base = int(body[0][address], 16)
    mismatched = 0
    per_line = collections.defaultdict(lambda: {"n": 0, "executed": 0.0, "samples": 0.0,
                                                "reasons": collections.Counter()})
    for r in body:
        line, local_opcode = table.get(int(r[address], 16) - base, ("?", "?"))
        mismatched += local_opcode != opcode(r[source].strip())
        entry = per_line[line]
        entry["n"] += 1
        entry["executed"] += number(r[executed])
        entry["samples"] += number(r[samples])
        for i, name in reasons:
            entry["reasons"][name] += number(r[i])
    if mismatched > len(body) // 100:
        print(f"WARNING: {mismatched} of {len(body)} opcodes differ from the local cubin's: not the same code")
    total_executed = max(sum(e["executed"] for e in per_line.values()), 1.0)
    total_samples = max(sum(e["samples"] for e in per_line.values()), 1.0)
    print(f"{len(body)} instructions ({mismatched} opcodes unlike the local cubin's), executed "
          f"{total_executed:.0f} ({total_executed / args.per:.0f} per unit), samples {total_samples:.0f}")

    def show(label, entries):
        executed_sum = sum(e["executed"] for e in entries)
        sample_sum = sum(e["samples"] for e in entries)
        merged = collections.Counter()
        for e in entries:
            merged.update(e["reasons"])
        top = ",".join(f"{name} {100 * v / max(sample_sum, 1):.0f}%" for name, v in merged.most_common(3))
        print(f"  {label:>24s} {sum(e['n'] for e in entries):5d} {executed_sum / args.per:10.1f}"
              f" {100 * executed_sum / total_executed:5.1f} % {100 * sample_sum / total_samples:5.1f} %  {top}")

    if args.steps:
        bounds = sorted((int(b), name) for b, name in (s.split(":", 1) for s in args.steps.split(",")))
        by_step = collections.defaultdict(list)
        for line, entry in per_line.items():
            name = next((n for b, n in bounds if isinstance(line, int) and line < b), "other")
            by_step[name].append(entry)
        print("\nby step (static instructions, executed per unit, % executed, % samples, main reasons):")
        for name, entries in sorted(by_step.items(), key=lambda kv: -sum(e["samples"] for e in kv[1])):
            show(name, entries)
    print(f"\ntop {args.top} lines by samples (line, static instructions, executed per unit, % executed,"
          " % samples, main reasons):")
    for line, entry in sorted(per_line.items(), key=lambda kv: -kv[1]["samples"])[:args.top]:
        show(str(line), [entry])


if __name__ == "__main__":
    main()
