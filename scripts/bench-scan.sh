#!/usr/bin/env bash
# bench-scan.sh — `auditlens scan` of a 1 GB audit log beside one pass of jq
# over the same file that only extracts the raw material of the watch-loop
# diagnosis by hand (Services watches with their resourceVersion, Endpoints
# deletes and creates: scripts/watchloop.jq), the way the seed incident was
# found. The log is 800,000 generated events plus the seed incident at real
# time scale (watch restarts every 5-10 minutes), built once into
# $BENCH_DIR. scan runs twice a round: as it is (the engine's JSON parser
# reads the log) and with --reader decoder (the Go decoder and the durable
# schema, as import does). Runs alternate, jq first; each prints wall
# seconds and peak RSS (GNU time), then min, median and max of each.
#
#   scripts/bench-scan.sh [RUNS]        (default 3; make bench-scan)
set -euo pipefail

RUNS="${1:-3}"
BIN="${BIN:-bin/auditlens}"
BENCH_DIR="${BENCH_DIR:-/tmp/auditlens-bench}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOG="$BENCH_DIR/scan-1g.log"
command -v jq >/dev/null || { echo "bench-scan: jq is not installed (apt-get install jq)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "bench-scan: GNU time is not installed (apt-get install time)" >&2; exit 1; }
mkdir -p "$BENCH_DIR"
# Built again when the generator's output has changed (its first 1,000
# events differ from the log's).
if [[ ! -s "$LOG" ]] || ! cmp -s <("$BIN" gen --events 1000) <(head -n 1000 "$LOG"); then
	echo "bench-scan: building $LOG (800k generated events + the seed incident at real time scale)" >&2
	"$BIN" gen --events 800000 --out "$BENCH_DIR/scan-background.log"
	"$BIN" gen --scenario seed-incident --scale real --out "$BENCH_DIR/scan-seed.log"
	cat "$BENCH_DIR/scan-background.log" "$BENCH_DIR/scan-seed.log" >"$LOG.tmp"
	rm -f "$BENCH_DIR/scan-background.log" "$BENCH_DIR/scan-seed.log"
	mv "$LOG.tmp" "$LOG"
fi
echo "bench-scan: $(du -h "$LOG" | cut -f1) $(wc -l <"$LOG") events; $(jq --version); load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# measure NAME CMD...: one run; appends "wall rss_kib" to $BENCH_DIR/NAME.times.
measure() {
	local name="$1" t
	shift
	t="$(mktemp)"
	/usr/bin/time -f '%e %M' -o "$t" "$@" >"$BENCH_DIR/$name.out" 2>"$BENCH_DIR/$name.err" || true
	# GNU time says first when the command exited non-zero (scan does
	# when it finds something); the figures are the last line.
	tail -n1 "$t" >>"$BENCH_DIR/$name.times"
	echo "bench-scan: $name: $(tail -n1 "$t") (wall s, peak RSS KiB)$(grep -q non-zero "$t" && echo '; exited non-zero')" >&2
	rm -f "$t"
}
rm -f "$BENCH_DIR/jq.times" "$BENCH_DIR/scan.times" "$BENCH_DIR/scan-decoder.times"
for ((i = 1; i <= RUNS; i++)); do
	measure jq jq -c -f "$HERE/watchloop.jq" "$LOG"
	measure scan env CHDB_LIB_PATH="${CHDB_LIB_PATH:-}" "$BIN" scan --tmp "$BENCH_DIR" "$LOG"
	measure scan-decoder env CHDB_LIB_PATH="${CHDB_LIB_PATH:-}" "$BIN" scan --reader decoder --tmp "$BENCH_DIR" "$LOG"
done
cmp -s "$BENCH_DIR/scan.out" "$BENCH_DIR/scan-decoder.out" || echo "bench-scan: the two readers' findings differ: diff $BENCH_DIR/scan.out $BENCH_DIR/scan-decoder.out" >&2
echo "bench-scan: jq extracted $(wc -l <"$BENCH_DIR/jq.out") lines; scan found $(grep -c '' "$BENCH_DIR/scan.out") lines of findings" >&2

# stats FILE COLUMN: min median max.
stats() { sort -n -k"$2" "$1" | awk -v c="$2" '{v[NR]=$c} END {printf "%s %s %s", v[1], v[int((NR+1)/2)], v[NR]}'; }
read -r jmin jmed jmax <<<"$(stats "$BENCH_DIR/jq.times" 1)"
read -r smin smed smax <<<"$(stats "$BENCH_DIR/scan.times" 1)"
read -r _ jrss _ <<<"$(stats "$BENCH_DIR/jq.times" 2)"
read -r _ srss _ <<<"$(stats "$BENCH_DIR/scan.times" 2)"
read -r dmin dmed dmax <<<"$(stats "$BENCH_DIR/scan-decoder.times" 1)"
read -r _ drss _ <<<"$(stats "$BENCH_DIR/scan-decoder.times" 2)"
printf '%-28s %8s %8s %8s %12s\n' "" "min s" "median s" "max s" "median RSS"
printf '%-28s %8s %8s %8s %9d MiB\n' "jq (baseline)" "$jmin" "$jmed" "$jmax" "$((jrss / 1024))"
printf '%-28s %8s %8s %8s %9d MiB\n' "auditlens scan" "$smin" "$smed" "$smax" "$((srss / 1024))"
printf '%-28s %8s %8s %8s %9d MiB\n' "auditlens scan --reader decoder" "$dmin" "$dmed" "$dmax" "$((drss / 1024))"
awk -v j="$jmed" -v s="$smed" -v d="$dmed" 'BEGIN {printf "scan is %.2fx faster than the jq pass, --reader decoder %.2fx (median / median)\n", j / s, j / d}'
