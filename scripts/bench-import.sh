#!/usr/bin/env bash
# bench-import.sh — import of a generated log into a fresh embedded store,
# beside its baseline (the same file read and decoded, not stored:
# `import --decode-only`), alternating, ROUNDS rounds. Each run's wall time,
# CPU (user + sys), peak RSS and, for the import, `du -sb` of the store right
# after it; then min–median–max per measure and the load average before and
# after.
#
#   scripts/bench-import.sh [ROUNDS] [EVENTS]     (defaults 3, 1000000; make bench-import)
#
# The log is generated once into BENCH_DIR and generated again when the
# generator's output has changed (its first 1,000 events differ).
set -euo pipefail

ROUNDS="${1:-3}"
EVENTS="${2:-1000000}"
BENCH_DIR="${BENCH_DIR:-/tmp/auditlens-bench}"
BIN="${BIN:-bin/auditlens}"
LOG="$BENCH_DIR/audit-$EVENTS.log"
STORE="$BENCH_DIR/import-store"
mkdir -p "$BENCH_DIR"

if [[ ! -s "$LOG" ]] || ! cmp -s <("$BIN" gen --events 1000) <(head -n 1000 "$LOG"); then
	echo "bench-import: generating $LOG" >&2
	"$BIN" gen --events "$EVENTS" --out "$LOG"
fi

results="$(mktemp)"
trap 'rm -f "$results"; rm -rf "$STORE"' EXIT
load0="$(cut -d' ' -f1-3 /proc/loadavg)"

mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1e6 }'; }

# run KIND ARGS...: one timed run, a line "KIND wall cpu rss_kib du" in $results.
run() {
	local kind="$1" t
	shift
	t="$(mktemp)"
	/usr/bin/time -o "$t" -f '%e %U %S %M' "$BIN" import --cluster bench --no-detect --progress never "$@" "$LOG" >/dev/null
	local du=0
	if [[ "$kind" == import ]]; then
		du="$(du -sb "$STORE" | cut -f1)"
	fi
	read -r wall user sys rss <"$t"
	rm -f "$t"
	local cpu
	cpu="$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.2f", u + s }')"
	echo "$kind $wall $cpu $rss $du" >>"$results"
	echo "bench-import: $kind round $round: wall ${wall}s, CPU ${cpu}s, peak RSS $((rss / 1024)) MiB$([[ $du != 0 ]] && echo ", store $(mb "$du") MB")" >&2
}

for round in $(seq "$ROUNDS"); do
	if ((round % 2)); then order="decode import"; else order="import decode"; fi
	for kind in $order; do
		if [[ "$kind" == decode ]]; then
			run decode --decode-only
		else
			rm -rf "$STORE"
			run import --store "chdb://$STORE"
		fi
	done
done

# stats COLUMN KIND: min median max of a column over KIND's runs.
stats() {
	awk -v k="$2" -v c="$1" '$1 == k { print $c }' "$results" | sort -g |
		awk '{ v[NR] = $1 } END { printf "%s %s %s", v[1], v[int((NR + 1) / 2)], v[NR] }'
}
printf '\n%d events, %d rounds; load average before %s, after %s\n' "$EVENTS" "$ROUNDS" "$load0" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-22s %-24s %-24s %-24s %s\n' "" "wall s (min med max)" "CPU s" "peak RSS MiB" "store MB right after"
for kind in decode import; do
	read -r w0 w1 w2 <<<"$(stats 2 "$kind")"
	read -r c0 c1 c2 <<<"$(stats 3 "$kind")"
	read -r r0 r1 r2 <<<"$(stats 4 "$kind")"
	read -r d0 d1 d2 <<<"$(stats 5 "$kind")"
	name="import --decode-only"
	[[ "$kind" == import ]] && name="import into chDB"
	du=""
	[[ "$kind" == import ]] && du="$(mb "$d0") $(mb "$d1") $(mb "$d2")"
	printf '%-22s %-24s %-24s %-24s %s\n' "$name" "$w0 $w1 $w2" "$c0 $c1 $c2" "$((r0 / 1024)) $((r1 / 1024)) $((r2 / 1024))" "$du"
done
read -r _ wd _ <<<"$(stats 2 decode)"
read -r _ wi _ <<<"$(stats 2 import)"
awk -v n="$EVENTS" -v i="$wi" -v d="$wd" 'BEGIN { printf "events/s (median wall): import %.0f, decode-only %.0f; import / baseline %.2f\n", n / i, n / d, d / i }'
