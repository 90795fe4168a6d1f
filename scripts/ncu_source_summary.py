"""Summarise Nsight Compute's per-instruction (SASS) counters of one kernel: where its warps stall
and which instructions (or, with `--print-source cuda`, source lines) it executes most, short enough
for one device call's log.

    ncu --clock-control none -k regex:b2b_backward_wgmma_tf32 -c 1 \
        --section SourceCounters --section WarpStateStats -o /tmp/prof \
        python3 scripts/profile_cases.py bwd b2b-km128-fp32
    ncu -i /tmp/prof.ncu-rep --page source --csv --print-source sass \
        | python3 scripts/ncu_source_summary.py [--top N]

Prints the columns found, the totals, the stall samples by reason, and for the SASS view the samples
and executions by opcode and by segment (the code between two barriers, `BAR.*`), then the top N
rows by stall samples with their two main reasons. SASS addresses are printed from the kernel's
start (its first row), as `cuobjdump -sass` numbers them: a local `nvcc -cubin -arch=sm_90a` of the
same source with the GPU machine's nvcc gives the same code (session 39).
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


class Table:
    def __init__(self, header, body):
        self.header, self.body = header, [r for r in body if len(r) == len(header)]
        self.sass = column(header, "Address") is not None
        # The SASS view keys rows by Address, the CUDA view by line number.
        self.key = next(c for c in (column(header, "Address"), column(header, "Line"), column(header, "#"))
                        if c is not None)
        self.source = column(header, "Source")
        self.samples = column(header, "Stall Sampling", "All")
        self.not_issued = column(header, "Stall Sampling", "Not")
        self.executed = next((i for i, n in enumerate(header) if n.strip() == "Instructions Executed"), None)
        # Per-reason sample columns (stall_barrier, stall_long_sb, ...; not the "(Not Issued)" copies).
        self.reasons = [(i, n.strip()[len("stall_"):]) for i, n in enumerate(header)
                        if n.strip().startswith("stall_") and "Not Issued" not in n]
        self.base = int(self.body[0][self.key], 16) if self.sass and self.body else 0
        self.total_samples = max(sum(self.value(r, self.samples) for r in self.body), 1.0)

    def value(self, r, i):
        return number(r[i]) if i is not None else 0.0

    def where(self, r):
        return f"{int(r[self.key], 16) - self.base:#07x}" if self.sass else r[self.key]

    def text(self, r):
        return r[self.source].strip()

    def share(self, rows):
        return 100 * sum(self.value(r, self.samples) for r in rows) / self.total_samples

    def main_reasons(self, rows, count):
        sums = [(sum(self.value(r, i) for r in rows), name) for i, name in self.reasons]
        total = max(sum(self.value(r, self.samples) for r in rows), 1.0)
        return ",".join(f"{name} {100 * v / total:.0f}%" for v, name in sorted(sums, reverse=True)[:count] if v > 0)


def opcode(text):
    match = re.search(r"([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", re.sub(r"^@!?U?P\w+\s+", "", text))
    return match.group(1) if match else "?"


def print_by_opcode(t):
    by_opcode = collections.defaultdict(list)
    for r in t.body:
        by_opcode[opcode(t.text(r))].append(r)
    print("\nby opcode (executed, % of samples):")
    for name, rows in sorted(by_opcode.items(), key=lambda kv: -t.share(kv[1]))[:30]:
        print(f"  {name:32s} {sum(t.value(r, t.executed) for r in rows):14.0f} {t.share(rows):6.2f} %")


def print_segments(t):
    """The code between barriers: a phase of a kernel whose warps meet at block or named barriers."""
    segments, current = [], []
    for r in t.body:
        current.append(r)
        if opcode(t.text(r)).startswith("BAR.") or opcode(t.text(r)) == "EXIT":
            segments.append(current)
            current = []
    if current:
        segments.append(current)
    print("\nby segment, each ending at a barrier (start-end, instructions, executed, % of samples, main reasons,"
          " last instruction):")
    for rows in segments:
        print(f"  {t.where(rows[0])}-{t.where(rows[-1])} {len(rows):5d} {sum(t.value(r, t.executed) for r in rows):13.0f}"
              f" {t.share(rows):6.2f} %  {t.main_reasons(rows, 3):40s} {t.text(rows[-1])}")


def main():
    top = int(sys.argv[sys.argv.index("--top") + 1]) if "--top" in sys.argv else 40
    rows = [r for r in csv.reader(sys.stdin) if r]
    start = next((i for i, r in enumerate(rows) if column(r, "Source") is not None and
                  any(column(r, k) is not None for k in ("Address", "Line", "#"))), None)
    if start is None:
        sys.exit("ncu_source_summary: no source table (Address or Line, and Source columns) in the input")
    t = Table(rows[start], rows[start + 1:])
    print("columns:", " | ".join(t.header))
    print(f"{len(t.body)} rows; samples {t.total_samples:.0f}, not-issued samples "
          f"{sum(t.value(r, t.not_issued) for r in t.body):.0f}, instructions executed "
          f"{sum(t.value(r, t.executed) for r in t.body):.0f}")
    print("stall samples by reason:", t.main_reasons(t.body, 12))
    if t.sass:
        print_by_opcode(t)
        print_segments(t)
    print(f"\ntop {top} by stall samples (where, % of samples, not issued, executed, main reasons, source):")
    for r in sorted(t.body, key=lambda r: -t.value(r, t.samples))[:top]:
        print(f"  {t.where(r):>8s} {t.share([r]):6.2f} % {t.value(r, t.not_issued):8.0f} {t.value(r, t.executed):12.0f}"
              f"  {t.main_reasons([r], 2):28s} {t.text(r)}")


if __name__ == "__main__":
    main()
