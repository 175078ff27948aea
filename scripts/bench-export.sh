#!/usr/bin/env bash
# bench-export.sh — `auditlens export` of a whole store to NDJSON and to
# Parquet, beside one `jq -c .` pass over the log the store was imported
# from (the same events, as a file a user already has). The log is
# bench-scan's (800,000 generated events plus the seed incident at real time
# scale, scripts/bench-scan.sh builds it); the store is imported from it
# once into $BENCH_DIR/export-store and imported again when the log is
# newer. Runs alternate, jq first; each prints wall seconds and peak RSS
# (GNU time), then min, median and max of each. After the last round the
# NDJSON export is compared with the log as sets of lines (sorted): an
# export must give back every event, byte for byte.
#
#   scripts/bench-export.sh [RUNS]      (default 3; make bench-export)
set -euo pipefail

RUNS="${1:-3}"
BIN="${BIN:-bin/auditlens}"
BENCH_DIR="${BENCH_DIR:-/tmp/auditlens-bench}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LOG="$BENCH_DIR/scan-1g.log"
STORE="$BENCH_DIR/export-store"
command -v jq >/dev/null || { echo "bench-export: jq is not installed (apt-get install jq)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "bench-export: GNU time is not installed (apt-get install time)" >&2; exit 1; }
mkdir -p "$BENCH_DIR"
if [[ ! -s "$LOG" ]] || ! cmp -s <("$BIN" gen --events 1000) <(head -n 1000 "$LOG"); then
	# bench-scan builds the log; one round of it is the cheapest way there.
	BIN="$BIN" BENCH_DIR="$BENCH_DIR" "$HERE/bench-scan.sh" 1 >/dev/null
fi
if [[ ! -d "$STORE" || "$LOG" -nt "$STORE/.imported" ]]; then
	echo "bench-export: importing $LOG into $STORE" >&2
	rm -rf "$STORE"
	"$BIN" import --store "chdb://$STORE" --cluster bench --no-detect --progress never "$LOG" >/dev/null
	touch "$STORE/.imported"
fi
echo "bench-export: $(du -h "$LOG" | cut -f1) $(wc -l <"$LOG") events; $(jq --version); load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# measure NAME CMD...: one run; appends "wall rss_kib" to $BENCH_DIR/NAME.times.
measure() {
	local name="$1" t
	shift
	t="$(mktemp)"
	/usr/bin/time -f '%e %M' -o "$t" "$@" 2>"$BENCH_DIR/$name.err" || { echo "bench-export: $name failed: $(tail -n3 "$BENCH_DIR/$name.err")" >&2; exit 1; }
	tail -n1 "$t" >>"$BENCH_DIR/$name.times"
	echo "bench-export: $name: $(tail -n1 "$t") (wall s, peak RSS KiB)" >&2
	rm -f "$t"
}
rm -f "$BENCH_DIR"/{jq-c,export-ndjson,export-parquet}.times
for ((i = 1; i <= RUNS; i++)); do
	measure jq-c sh -c 'jq -c . "$1" >"$2"' _ "$LOG" "$BENCH_DIR/jq-c.out"
	measure export-ndjson env CHDB_LIB_PATH="${CHDB_LIB_PATH:-}" "$BIN" export --store "chdb://$STORE" --progress never -o "$BENCH_DIR/export.ndjson"
	measure export-parquet env CHDB_LIB_PATH="${CHDB_LIB_PATH:-}" "$BIN" export --store "chdb://$STORE" --progress never -o "$BENCH_DIR/export.parquet"
done
rm -f "$BENCH_DIR/jq-c.out"
if cmp -s <(LC_ALL=C sort "$LOG") <(LC_ALL=C sort "$BENCH_DIR/export.ndjson"); then
	echo "bench-export: the NDJSON export holds the log's lines, byte for byte" >&2
else
	echo "bench-export: the NDJSON export differs from the log: compare sorted $LOG and $BENCH_DIR/export.ndjson" >&2
	exit 1
fi
echo "bench-export: Parquet file $(du -h "$BENCH_DIR/export.parquet" | cut -f1), NDJSON $(du -h "$BENCH_DIR/export.ndjson" | cut -f1)" >&2

# stats FILE COLUMN: min median max.
stats() { sort -n -k"$2" "$1" | awk -v c="$2" '{v[NR]=$c} END {printf "%s %s %s", v[1], v[int((NR+1)/2)], v[NR]}'; }
printf '%-26s %8s %8s %8s %12s\n' "" "min s" "median s" "max s" "max RSS"
for n in jq-c export-ndjson export-parquet; do
	read -r a b c <<<"$(stats "$BENCH_DIR/$n.times" 1)"
	read -r _ _ r <<<"$(stats "$BENCH_DIR/$n.times" 2)"
	printf '%-26s %8s %8s %8s %8d MiB\n' "$n" "$a" "$b" "$c" "$((r / 1024))"
done
read -r _ j _ <<<"$(stats "$BENCH_DIR/jq-c.times" 1)"
read -r _ e _ <<<"$(stats "$BENCH_DIR/export-ndjson.times" 1)"
read -r _ p _ <<<"$(stats "$BENCH_DIR/export-parquet.times" 1)"
awk -v j="$j" -v e="$e" -v p="$p" 'BEGIN {printf "NDJSON export is %.2fx faster than jq -c ., Parquet %.2fx (median / median)\n", j / e, j / p}'
