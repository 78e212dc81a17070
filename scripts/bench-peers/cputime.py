#!/usr/bin/env python3
"""Runs a command and writes its CPU time (user and system seconds, with
microseconds: /usr/bin/time rounds to 10 ms) to a file; exits with the
command's status. For scripts/bench-client's "client CPU" column.

    python3 scripts/bench-peers/cputime.py OUT_FILE COMMAND [ARGS...]
"""

import resource
import subprocess
import sys


def main():
    out, command = sys.argv[1], sys.argv[2:]
    status = subprocess.call(command)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write(f"{usage.ru_utime:.6f} {usage.ru_stime:.6f}\n")
    sys.exit(status if status >= 0 else 128 - status)


if __name__ == "__main__":
    main()
