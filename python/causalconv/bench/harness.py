"""Measurement: the copy-bandwidth yardstick, CUDA-event timing and one case end to end."""

from __future__ import annotations

import statistics
from typing import Callable, Dict, Tuple

import torch

from .cases import DTYPE_NAME, Case, Unavailable

Timer = Callable[[Callable[[], object]], float]  # returns the median time of fn in ms

COPY_BYTES = 2 << 30
L2_FLUSH_BYTES = 256 << 20  # well above the H200's 60 MB L2


def make_timer(warmup_ms: int, rep_ms: int) -> Tuple[str, Timer]:
    """``triton.testing.do_bench`` when triton imports, else an equivalent CUDA-event loop."""
    try:
        from triton.testing import do_bench
    except ImportError:
        return "cuda-events", lambda fn: _event_median_ms(fn, warmup_ms, rep_ms)
    return "triton.testing.do_bench", lambda fn: do_bench(fn, warmup=warmup_ms, rep=rep_ms,
                                                           return_mode="median")


def _event_median_ms(fn, warmup_ms: int, rep_ms: int) -> float:
    # Like do_bench: flush L2 before every run so each starts cold, and keep the
    # GPU busy with the flush while the host enqueues fn.
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    estimate = statistics.median(_event_times_ms(fn, 5, flush))
    for _ in range(max(1, int(warmup_ms / estimate))):
        fn()
    return statistics.median(_event_times_ms(fn, max(10, int(rep_ms / estimate)), flush))


def _event_times_ms(fn, runs: int, flush: torch.Tensor):
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(runs)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]


def graph_timer(timer: Timer) -> Timer:
    """A timer of ``fn`` captured once in a CUDA graph and replayed: no host launch cost in the time."""
    def timed(fn):
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture: lazy initialisation, allocator pools
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        return timer(graph.replay)
    return timed


def copy_bandwidth_gbps(timer: Timer, nbytes: int = COPY_BYTES) -> float:
    """Device-to-device copy rate, counting the read and the write."""
    src = torch.ones(nbytes, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = timer(lambda: dst.copy_(src))
    del src, dst
    torch.cuda.empty_cache()
    return 2 * nbytes / ms / 1e6


def run_case(case: Case, timer: Timer, copy_gbps: float, seed: int,
             on_result: Callable[[str, dict], None], device: torch.device = torch.device("cuda")) -> dict:
    """Checks ours and every available baseline against the fp64 reference, then times them.

    ``on_result(implementation, result)`` is called as each result is complete.
    """
    inputs = case.make_inputs(device, seed)
    runners, results = {"ours": case.run_ours}, {}
    for name, factory in case.baselines.items():
        try:
            runners[name] = factory()
        except Unavailable as e:
            runners[name] = None
            results[name] = {"available": False, "reason": str(e)}

    try:
        ref = case.reference(inputs)
        checks = {name: _check(case, run, inputs, ref) for name, run in runners.items() if run}
        del ref  # fp64 results: free them before timing
    except Exception as e:  # e.g. out of memory in fp64 autograd: time the runs, but nothing passes unchecked
        first_line = (str(e).splitlines() or [""])[0][:120]
        note = f"not checked: the fp64 reference failed: {type(e).__name__}: {first_line}"
        checks = {name: {"rel_l2": None, "max_abs": None, "passed": False, "note": note} for name in runners}
    torch.cuda.empty_cache()

    for name, run in runners.items():  # ours first, then the baselines in their order
        if run:
            results[name] = dict(available=True, **checks[name])
            if "error" not in checks[name]:
                results[name].update(_timing(case, run, inputs, timer, copy_gbps))
        on_result(name, results[name])
    del inputs
    torch.cuda.empty_cache()

    return {"name": case.name, "family": case.family, "dtype": DTYPE_NAME[case.dtype],
            "bytes_moved": case.bytes_moved, "flops": case.flops,
            "memory_floor_ms": case.bytes_moved / copy_gbps / 1e6,
            "passed": results["ours"]["passed"], "results": {n: results[n] for n in runners}}


def _check(case: Case, run, inputs: Dict[str, torch.Tensor], ref) -> dict:
    try:
        outs = run(inputs)
        torch.cuda.synchronize()  # surface asynchronous launch errors here
        return case.check(outs, ref)
    except Exception as e:  # report any failure of one implementation, keep benchmarking the rest
        return {"passed": False, "error": f"{type(e).__name__}: {e}"}


def _timing(case: Case, run, inputs: Dict[str, torch.Tensor], timer: Timer, copy_gbps: float) -> dict:
    ms = timer(lambda: run(inputs))
    gbps = case.bytes_moved / ms / 1e6
    return {"ms": ms, "gbps": gbps, "pct_copy": 100 * gbps / copy_gbps, "tflops": case.flops / ms / 1e9}
