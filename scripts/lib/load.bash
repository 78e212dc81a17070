# The machine's load average around a benchmark run (sourced by the bash
# benchmark scripts; scripts/lib/loadavg.py is the same for the Python ones,
# and says why): a run taken above a 1-minute load average of 1 is marked
# "not comparable".
#
#   load_now                the 1, 5 and 15 minute load averages
#   load_line BEFORE AFTER  "load average before ..., after ...", and the
#                           NOT COMPARABLE line when either is above 1

load_now() {
  cut -d' ' -f1-3 /proc/loadavg
}

load_line() {
  echo "load average before $1, after $2"
  awk -v b="${1%% *}" -v a="${2%% *}" 'BEGIN {
    if (b > 1 || a > 1) print "NOT COMPARABLE: taken above a load average of 1 (other work on the machine slows some clients more than others)"
  }'
}
