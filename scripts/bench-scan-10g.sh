#!/usr/bin/env bash
# bench-scan-10g.sh — `auditlens scan` of ten rotated audit log files of
# ~1 GB each (8,000,000 events of one generated busy cluster, split every
# 800,000 lines as a rotation would), beside one jq pass over the same
# files that extracts the watch loop's raw material (scripts/watchloop.jq).
# Each prints wall seconds and peak RSS (GNU time). The files are built
# once into $BENCH_DIR/scan-10g (9.2 GiB).
#
#   scripts/bench-scan-10g.sh [RUNS]    (default 1; make bench-scan-10g)
set -euo pipefail

RUNS="${1:-1}"
BIN="${BIN:-bin/auditlens}"
BENCH_DIR="${BENCH_DIR:-/tmp/auditlens-bench}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
DIR="$BENCH_DIR/scan-10g"
command -v jq >/dev/null || { echo "bench-scan-10g: jq is not installed (apt-get install jq)" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "bench-scan-10g: GNU time is not installed (apt-get install time)" >&2; exit 1; }
if [[ ! -s "$DIR/audit-09.log" ]] || ! cmp -s <("$BIN" gen --events 1000 --seed 11) <(head -n 1000 "$DIR/audit-00.log"); then
	echo "bench-scan-10g: building $DIR (8M generated events in ten files)" >&2
	rm -rf "$DIR" && mkdir -p "$DIR"
	"$BIN" gen --events 8000000 --seed 11 | split -l 800000 -d -a 2 --additional-suffix=.log - "$DIR/audit-"
fi
echo "bench-scan-10g: $(du -sh "$DIR" | cut -f1) in $(ls "$DIR" | wc -l) files; $(jq --version); load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for ((i = 1; i <= RUNS; i++)); do
	/usr/bin/time -f 'bench-scan-10g: jq: %e s, peak RSS %M KiB' jq -c -f "$HERE/watchloop.jq" "$DIR"/audit-*.log >/dev/null
	/usr/bin/time -f 'bench-scan-10g: scan: %e s, peak RSS %M KiB' \
		env CHDB_LIB_PATH="${CHDB_LIB_PATH:-}" "$BIN" scan --tmp "$BENCH_DIR" "$DIR" >/dev/null || true
done
