#!/usr/bin/env bash
# bench-store.sh — build the scale benchmarks' store: EVENTS generated
# events of a large cluster (RATE events a second of event time, so that
# the hour the explorer benchmark shows, 08:05-09:05, holds about
# RATE*3600 of them) plus the seed incident at real time scale, all in
# cluster "bench" from 2026-05-04T08:00:00Z (where detect/detectors/bench_test.go
# and cmd/auditlens/ui_bench_test.go look), imported into the embedded
# store at STORE. The same arguments build the same events. Prints the
# build's wall time and the store's size; an existing store is kept.
#
#   scripts/bench-store.sh [STORE] [EVENTS] [RATE]
#   (defaults /var/tmp/auditlens-100m 100000000 15000; make bench-store)
set -euo pipefail

STORE="${1:-/var/tmp/auditlens-100m}"
EVENTS="${2:-100000000}"
RATE="${3:-15000}"
BIN="${BIN:-bin/auditlens}"
START=2026-05-04T08:00:00Z

if [[ -d "$STORE" ]]; then
	echo "bench-store: $STORE exists ($(du -sh "$STORE" | cut -f1)); remove it to build it again" >&2
	exit 0
fi
echo "bench-store: $EVENTS events at $RATE/s from $START into $STORE; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
t0=$SECONDS
# The generator streams into import: the log (~1.2 KB an event) is never
# written to disk.
"$BIN" gen --events "$EVENTS" --rate "$RATE" --start "$START" --seed 42 |
	"$BIN" import --store "chdb://$STORE" --cluster bench --no-detect --progress never -
"$BIN" gen --scenario seed-incident --scale real --start "$START" --seed 1 |
	"$BIN" import --store "chdb://$STORE" --cluster bench --no-detect --progress never -
wall=$((SECONDS - t0))
bytes="$(du -sb "$STORE" | cut -f1)"
echo "bench-store: built in ${wall}s; $(du -sh "$STORE" | cut -f1) ($(awk -v b="$bytes" -v n="$EVENTS" 'BEGIN {printf "%.0f", b / n}') bytes per event) right after the import" >&2
