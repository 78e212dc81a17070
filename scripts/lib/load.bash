# The machine's load average around a benchmark run (sourced by the bash
# benchmark scripts; scripts/lib/loadavg.py is the same for the Python ones,
# and says why): a run started above a 1-minute load average of 1 is
# marked "not comparable" (the load after is the benchmark's own).
#
#   load_now                the 1, 5 and 15 minute load averages
#   load_line BEFORE AFTER  "load average before ..., after ...", and the
#                           NOT COMPARABLE line when BEFORE is above 1

load_now() {
  cut -d' ' -f1-3 /proc/loadavg
}

load_line() {
  echo "load average before $1, after $2 (the benchmark's own load)"
  awk -v b="${1%% *}" 'BEGIN {
    if (b > 1) print "NOT COMPARABLE: started above a load average of 1 (other work on the machine slows some clients more than others)"
  }'
}
