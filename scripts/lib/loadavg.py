"""The machine's load average around a benchmark run, for the benchmark
scripts' tables (the bash ones use scripts/lib/load.bash, the same rule).

Other work on the machine slows some clients more than others (a
single-threaded peer more than a client whose I/O runs on threads of its
own), so figures taken under load are no evidence for a comparison: a run
started above a 1-minute load average of COMPARABLE is marked "not
comparable". Only the load before the run tells of other work: a
benchmark keeps both cores busy itself (servers on one, clients on the
other), so the load average during and after it is 2 to 4 of its own,
and a row's load would mark every row but the first. The load after is
printed for the reader. Instruction counts (callgrind) do not depend on
the load; the scripts that count them print it all the same.
"""

import os

COMPARABLE = 1.0


def now():
    """The 1, 5 and 15 minute load averages."""
    return os.getloadavg()


def text(load):
    return " ".join(f"{x:.2f}" for x in load)


def line(before, after):
    """The load average before and after a run, and, when the one before is
    above COMPARABLE, the line that says the run is not comparable."""
    out = f"load average before {text(before)}, after {text(after)} (the benchmark's own load)"
    if before[0] > COMPARABLE:
        out += ("\nNOT COMPARABLE: started above a load average of "
                f"{COMPARABLE:g} (other work on the machine slows some clients more than others)")
    return out


def mark(load):
    """A table row's suffix for a run that started at the 1-minute load
    average `load`: empty, or that it is not comparable."""
    return "" if load <= COMPARABLE else f" (not comparable: load {load:.2f})"


def counted_line(before, after):
    """The same for instruction counts: the load, which they do not depend on."""
    return f"load average before {text(before)}, after {text(after)} (instruction counts do not depend on it)"
