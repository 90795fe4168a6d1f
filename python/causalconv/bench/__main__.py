"""``python -m causalconv.bench``: time causalconv against its baselines and the copy roofline."""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import itertools
import sys
from pathlib import Path
from typing import List, Optional

import torch

import causalconv

from . import cases, harness, report

NO_GPU = ("causalconv.bench: no CUDA GPU visible (torch.cuda.is_available() is False);"
          " the benchmark needs one")


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m causalconv.bench",
        description="Time causalconv against its baselines and the measured copy bandwidth.")
    parser.add_argument("--quick", action="store_true", help="a small subset with short timing")
    parser.add_argument("--filter", action="append", default=[], metavar="SUBSTR",
                        help="only cases whose name contains SUBSTR (repeatable, or comma-separated)")
    parser.add_argument("--out", type=Path, default=Path("bench-out"),
                        help="directory for results.json and results.png (default: bench-out)")
    parser.add_argument("--list", action="store_true", help="list the selected cases and exit")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    parser.add_argument("--cuda-graph", action="store_true",
                        help="time the replay of a CUDA graph of each run: GPU time without the host's launch "
                             "overhead (what a model captured in a graph sees)")
    return parser.parse_args(argv)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    filters = [f.strip() for arg in args.filter for f in arg.split(",") if f.strip()]
    selected = cases.select(cases.CASES, filters, args.quick)
    if not selected:
        log(f"causalconv.bench: no registered case matches --filter {','.join(filters)}")
        return 2
    if args.list:
        print(report.format_case_list(selected))
        return 0
    if not torch.cuda.is_available():
        log(NO_GPU)
        return 2

    warmup_ms, rep_ms = (10, 50) if args.quick else (50, 500)
    timer_name, timer = harness.make_timer(warmup_ms, rep_ms)
    # The yardstick is always an eager copy kernel: a copy captured in a graph becomes a memcpy
    # node, which the H200 ran at 2.7 TB/s against 4.3 TB/s eager (session 5).
    copy_gbps = harness.copy_bandwidth_gbps(timer)
    if args.cuda_graph:
        timer_name, timer = timer_name + " of CUDA graph replays", harness.graph_timer(timer)
    log(f"timing with {timer_name}, median after {warmup_ms} ms warm-up over ~{rep_ms} ms of runs")
    log(f"copy bandwidth: {copy_gbps:.0f} GB/s ({harness.COPY_BYTES >> 30} GiB device-to-device copy)")

    total = sum(1 + len(c.baselines) for c in selected)
    step = itertools.count(1)
    results = []
    for case in selected:
        results.append(harness.run_case(
            case, timer, copy_gbps, args.seed,
            lambda impl, result: log(report.progress_line(next(step), total, case.name, impl, result))))

    summary = dict(environment(), timer=timer_name, warmup_ms=warmup_ms, rep_ms=rep_ms, seed=args.seed,
                   quick=args.quick, copy_bytes=harness.COPY_BYTES, copy_bandwidth_gbps=copy_gbps,
                   passed=all(r["passed"] for r in results), cases=results)
    print(report.format_table(summary))
    write_outputs(summary, args.out)
    return 0 if summary["passed"] else 1


def environment() -> dict:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return {"device": props.name, "compute_capability": f"{props.major}.{props.minor}",
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "causalconv": getattr(causalconv, "__version__", None), "triton": package_version("triton"),
            "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def package_version(name: str) -> Optional[str]:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_outputs(summary: dict, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    report.write_json(summary, out / "results.json")
    if report.write_chart(summary, out / "results.png"):
        log(f"wrote {out / 'results.json'} and {out / 'results.png'}")
    else:
        log(f"wrote {out / 'results.json'}; skipped results.png (matplotlib is not installed)")


if __name__ == "__main__":
    sys.exit(main())
