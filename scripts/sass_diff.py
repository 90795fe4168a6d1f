"""Which kernels of two cubins compile to different SASS: the check that a change leaves the
kernels users run as they were (e.g. an experiment behind a flag that is off, or a deletion).

    python3 scripts/sass_diff.py OLD.cubin NEW.cubin [--rename OLD_PART=NEW_PART ...]

The cubins: local `nvcc -cubin -gencode arch=compute_90a,code=sm_90a` builds of the same .cu before
and after (docs/gpu-machine.md). Each kernel's instructions are compared without their addresses,
so a kernel that only moved compares equal; --rename maps a mangled-name piece (a template argument
removed, say) so that the kernels pair up. Prints SAME / DIFF / ONLY per kernel; exit status 1 if
any differs. (Addresses run past four hex digits in kernels over 64 KB: a pattern of exactly four
compared only their first 4,096 instructions, session 49.)
"""

import argparse
import re
import subprocess
import sys

from ncu_lines import cuda_tool  # (scripts/, beside this file)

FUNCTION = re.compile(r"\s+Function : (\S+)")
INSTRUCTION = re.compile(r"\s+/\*[0-9a-f]{4,}\*/\s+([^;]*);")


def kernels(cubin):
    """Mangled name -> its instructions, addresses dropped."""
    sass = subprocess.run([cuda_tool("cuobjdump"), "-sass", cubin], check=True, capture_output=True,
                          text=True).stdout
    found, current = {}, None
    for line in sass.splitlines():
        if m := FUNCTION.match(line):
            current = found.setdefault(m.group(1), [])
        elif current is not None and (m := INSTRUCTION.match(line)):
            current.append(m.group(1).strip())
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD_PART=NEW_PART")
    args = parser.parse_args()
    old, new = kernels(args.old), kernels(args.new)
    renames = [r.split("=", 1) for r in args.rename]
    differ = False
    for name, code in sorted(old.items()):
        for a, b in renames:
            name = name.replace(a, b)
        if name not in new:
            print(f"ONLY old  {name}")
        elif new.pop(name) != code:
            print(f"DIFF      {name}")
            differ = True
        else:
            print(f"SAME      {name}")
    for name in sorted(new):
        print(f"ONLY new  {name}")
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
