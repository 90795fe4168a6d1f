"""A cubin's SASS with each instruction's control bits decoded: the stall count, the scoreboards it
sets for its result (write) and for reading its operands (read), and the scoreboards it waits on
before it issues. What `cuobjdump -sass` leaves in the hex words, and what
says which earlier load an instruction waits for (session 47: the depthwise streaming forward's
producer waited on its weight loads at its loop's first branch, scoreboard 5).

    python3 scripts/sass_control.py KERNEL.cubin [--function MANGLED] [--from 0x4100 --to 0x4400]

The cubin: a local `nvcc -cubin -arch=sm_90a` of the kernel's instantiation (docs/gpu-machine.md);
cuobjdump is found as ncu_lines.py finds nvdisasm. Each line:
    address  wait=<scoreboards waited on>  set=<written>/<read>  stall  instruction
Volta to Hopper encode the control bits in the top 23 bits of each 128-bit instruction: stall (4
bits), yield (1), write scoreboard (3; 7 = none), read scoreboard (3; 7 = none), wait mask (6), reuse.
"""

import argparse
import re
import subprocess

from ncu_lines import cuda_tool  # (scripts/, beside this file)

INSTRUCTION = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?);?\s*/\* (0x[0-9a-f]{16}) \*/")
HIGH_WORD = re.compile(r"\s*/\* (0x[0-9a-f]{16}) \*/")


def scoreboards(mask: int) -> str:
    return ",".join(str(b) for b in range(6) if mask >> b & 1) or "-"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("cubin")
    parser.add_argument("--function", help="a mangled kernel name (default: every kernel)")
    parser.add_argument("--from", dest="start", type=lambda s: int(s, 16), default=0)
    parser.add_argument("--to", dest="end", type=lambda s: int(s, 16), default=None)
    args = parser.parse_args()
    command = [cuda_tool("cuobjdump"), "-sass"] + (["-fun", args.function] if args.function else []) + [args.cubin]
    lines = subprocess.run(command, capture_output=True, text=True, check=True).stdout.splitlines()
    for i, line in enumerate(lines):
        if line.lstrip().startswith("Function :"):
            print(line.strip())
        match = INSTRUCTION.match(line)
        if not match or i + 1 >= len(lines):
            continue
        high = HIGH_WORD.match(lines[i + 1])
        address = int(match.group(1), 16)
        if not high or address < args.start or (args.end is not None and address > args.end):
            continue
        control = int(high.group(1), 16) >> 41
        stall = control & 0xF
        write, read, wait = control >> 5 & 7, control >> 8 & 7, control >> 11 & 0x3F
        sets = f"{'-' if write == 7 else write}/{'-' if read == 7 else read}"
        print(f"{address:#07x}  wait={scoreboards(wait):<11} set={sets:<4} {stall:2d}  {match.group(2).strip()}")


if __name__ == "__main__":
    main()
