"""The copy rate at the benchmark's own sizes, as a share of its yardstick (the 2 GiB eager copy that
`python -m causalconv.bench` measures): what "% of copy" a kernel that moves as many bytes as a
plain device-to-device copy of its input could reach, its launch ramp and tail included. Timed as
the benchmark times its yardstick (do_bench medians, L2 flushed between runs, eager: a copy
captured in a CUDA graph becomes a memcpy node, another engine's rate; --graph-nodes times those).

    python3 scripts/copy_ceiling.py [--graph-nodes] [MiB ...]

Each size is one tensor copied into another (read + written), e.g. 64 MiB: bf16 B1 D4096 L8192,
the x of the depthwise K7 / K128 rows (and of B8 D2048 L2048).
"""

import argparse

from causalconv.bench import harness


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--graph-nodes", action="store_true", help="time the sizes as CUDA graph memcpy nodes")
    parser.add_argument("mib", type=int, nargs="*", default=[16, 32, 64, 128, 192, 256, 512, 1024])
    args = parser.parse_args()
    _, timer = harness.make_timer(warmup_ms=25, rep_ms=200)
    yardstick = harness.copy_bandwidth_gbps(timer)
    print(f"yardstick: {yardstick:.0f} GB/s ({harness.COPY_BYTES >> 20} MiB, eager)")
    sized_timer = harness.graph_timer(timer) if args.graph_nodes else timer
    for mib in args.mib:
        rate = harness.copy_bandwidth_gbps(sized_timer, mib << 20)
        print(f"{mib:5d} MiB: {rate:5.0f} GB/s, {100 * rate / yardstick:5.1f} % of the yardstick")


if __name__ == "__main__":
    main()
