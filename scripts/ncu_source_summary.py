"""Summarise Nsight Compute's per-instruction (SASS) counters of one kernel: where its warps stall
and which instructions (or, from a -lineinfo build with `--print-source cuda`, source lines) it
executes most, short enough for one device call's log.

    ncu --clock-control none -k regex:b2b_backward_wgmma_tf32 -c 1 \
        --section SourceCounters --section WarpStateStats -o /tmp/prof \
        python3 scripts/profile_cases.py bwd b2b-km128-fp32
    ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass \
        | python3 scripts/ncu_source_summary.py [--top N]

Prints the columns found, the totals, the executed instructions and stall samples by opcode, and the
top N instructions (address, samples, executions, their two main stall reasons, SASS) by stall
samples. The addresses are absolute: subtract the kernel's start (match one instruction against
`cuobjdump -sass` of the same build, compiled locally with the GPU machine's nvcc: session 39's
matched exactly) to read them in context.
"""

import collections
import csv
import re
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def column(header, *needles):
    """The first column whose name contains every needle (case-insensitive), or None."""
    for i, name in enumerate(header):
        if all(n.lower() in name.lower() for n in needles):
            return i
    return None


def main():
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    rows = [r for r in csv.reader(sys.stdin) if r]
    # The SASS view keys rows by Address, the CUDA view (a -lineinfo build) by line number.
    def key_column(r):
        return next((c for c in (column(r, "Address"), column(r, "Line"), column(r, "#")) if c is not None), None)

    start = next((i for i, r in enumerate(rows) if key_column(r) is not None and column(r, "Source") is not None), None)
    if start is None:
        sys.exit("ncu_source_summary: no source table (Address or Line, and Source columns) in the input")
    header, body = rows[start], rows[start + 1 :]
    print("columns:", " | ".join(header))
    address, source = key_column(header), column(header, "Source")
    samples = column(header, "Stall Sampling", "All")
    not_issued = column(header, "Stall Sampling", "Not")
    executed = next((i for i, n in enumerate(header) if n.strip() == "Instructions Executed"), None)
    body = [r for r in body if len(r) == len(header)]

    def value(r, i):
        return number(r[i]) if i is not None else 0.0

    totals = {name: sum(value(r, i) for r in body) for name, i in
              (("samples", samples), ("not-issued samples", not_issued), ("instructions executed", executed))}
    print(f"{len(body)} instructions;", ", ".join(f"{k} {v:.0f}" for k, v in totals.items()))

    total_samples = max(totals["samples"], 1.0)
    if column(header, "Address") is not None:
        by_opcode_summary(body, source, executed, samples, value, total_samples)

    # Per-reason sample columns (stall_barrier, stall_long_sb, ...; not the "(Not Issued)" copies).
    reasons = [(i, n.strip()[len("stall_"):]) for i, n in enumerate(header)
               if n.strip().startswith("stall_") and "Not Issued" not in n]
    print(f"\ntop {top} by stall samples (key, % of samples, not issued, executed, main reasons, source):")
    for r in sorted(body, key=lambda r: -value(r, samples))[:top]:
        main = sorted(((value(r, i), name) for i, name in reasons), reverse=True)[:2]
        why = ",".join(f"{name} {100 * v / max(value(r, samples), 1.0):.0f}%" for v, name in main if v > 0)
        print(f"  {r[address]:>8s} {100 * value(r, samples) / total_samples:6.2f} % {value(r, not_issued):8.0f}"
              f" {value(r, executed):12.0f}  {why:28s} {r[source].strip()}")


def by_opcode_summary(body, source, executed, samples, value, total_samples):
    by_opcode = collections.defaultdict(lambda: [0.0, 0.0])
    for r in body:
        match = re.search(r"([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", re.sub(r"^@!?U?P\w+\s+", "", r[source].strip()))
        opcode = match.group(1) if match else "?"
        by_opcode[opcode][0] += value(r, executed)
        by_opcode[opcode][1] += value(r, samples)
    print("\nby opcode (executed, % of samples):")
    for opcode, (ex, sa) in sorted(by_opcode.items(), key=lambda kv: -kv[1][1])[:30]:
        print(f"  {opcode:32s} {ex:14.0f} {100 * sa / total_samples:6.2f} %")


if __name__ == "__main__":
    main()
