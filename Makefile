# auditlens — make run starts the service on the embedded engine; make test
# runs every test. Both fetch what they need (the chDB library) on first use.

GO            ?= go
BIN           := bin/auditlens
STATICCHECK   := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOFLAGS_TEST  ?=
# chDB's library lives in the user cache (outside the clone), keyed by version.
CHDB_VERSION  := $(shell sed -n 's/^LIB_VERSION="\(.*\)"/\1/p' scripts/chdb-lib.sh)
CHDB_LIB      := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/auditlens/chdb/$(CHDB_VERSION)/libchdb.so

.PHONY: all build run test check chdb chromium screenshots e2e-bins e2e e2e-fixtures soak fmt vet staticcheck bench bench-import bench-cost bench-webhook bench-scan bench-scan-10g bench-export bench-store bench-detect bench-explorer fuzz clean

all: build

$(CHDB_LIB):
	scripts/chdb-lib.sh

## chdb: fetch the pinned chDB library into the cache (checked by sha256)
chdb: $(CHDB_LIB)

## build: build bin/auditlens (the UI and migrations are embedded)
build:
	$(GO) build -o $(BIN) ./cmd/auditlens

## run: serve on 127.0.0.1:8080 with the embedded engine, data in ./data
run: chdb build
	CHDB_LIB_PATH=$(CHDB_LIB) ./$(BIN) serve --data ./data

## test: every test, on the real embedded engine, a real kube-apiserver
## (deploy/e2e, whose binaries are built into the cache on first use), a
## real browser (Debian's Chromium, installed on first use) and FUSE (the
## power-loss test mounts internal/testkit/crashfs: root and /dev/fuse)
test: chdb e2e-bins chromium
	CHDB_LIB_PATH=$(CHDB_LIB) AUDITLENS_REQUIRE_BROWSER=1 AUDITLENS_REQUIRE_FUSE=1 $(GO) test $(GOFLAGS_TEST) -count=1 -parallel 4 -timeout 30m ./...

## chromium: install Debian's Chromium for the UI browser tests (apt-get)
chromium:
	scripts/chromium.sh

## screenshots: rewrite the UI screenshots in docs/screenshots/
screenshots: chdb chromium
	mkdir -p docs/screenshots
	CHDB_LIB_PATH=$(CHDB_LIB) AUDITLENS_UI_SCREENSHOTS=$(CURDIR)/docs/screenshots $(GO) test -count=1 -run 'TestUIInBrowser|TestUIIncidentScenarios' ./cmd/auditlens/

## e2e-bins: build the pinned kube-apiserver, kube-controller-manager, etcd,
## etcdctl, etcdutl, the OpenTelemetry Collector and Alertmanager into the user
## cache (10-20 minutes once, the collector 2-5 of them, Alertmanager 1-4; a
## cached run only checks them)
e2e-bins:
	deploy/e2e/build.sh >/dev/null

## e2e: the end-to-end tests alone: real etcd + kube-apiserver → webhook → auditlens
e2e: chdb e2e-bins
	CHDB_LIB_PATH=$(CHDB_LIB) $(GO) test $(GOFLAGS_TEST) -count=1 -parallel 4 -timeout 30m -v ./deploy/e2e/

## e2e-fixtures: rerun the end-to-end scenarios and rewrite deploy/e2e/fixtures/
e2e-fixtures: chdb e2e-bins
	CHDB_LIB_PATH=$(CHDB_LIB) AUDITLENS_E2E_UPDATE=1 $(GO) test -count=1 -parallel 4 -timeout 30m -v -run 'TestRealAPIServer|TestHeartbeatLoss|TestRVRollback$$' ./deploy/e2e/
	$(GO) test -count=1 -run 'TestFixtures|TestHeartbeatFixtures|TestRVRollbackFixtures' ./deploy/e2e/

## soak: the busy cluster's load for SOAK (default 3h) at real time scale,
## serve evaluating every minute; samples RSS, spool and findings each
## minute into docs/soak/ (soak.csv, soak.svg); the loop is triggered
## at SOAK_TRIGGER (default: two thirds of the way in)
SOAK ?= 3h
SOAK_TRIGGER ?=
soak: chdb e2e-bins
	CHDB_LIB_PATH=$(CHDB_LIB) AUDITLENS_SOAK=$(SOAK) AUDITLENS_SOAK_TRIGGER=$(SOAK_TRIGGER) AUDITLENS_SOAK_OUT=$(CURDIR)/docs/soak $(GO) test -count=1 -v -run '^TestSoak$$' -timeout 24h ./deploy/e2e/

## check: formatting, vet, staticcheck and the race detector
check: chdb
	@fmt=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$fmt" ]; then echo "gofmt needed: $$fmt"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	CHDB_LIB_PATH=$(CHDB_LIB) $(GO) test -race -count=1 -parallel 4 -timeout 40m ./...

## bench: the Go benchmarks behind docs/benchmarks.md
bench: chdb
	CHDB_LIB_PATH=$(CHDB_LIB) $(GO) test -run '^$$' -bench . -benchmem -benchtime 3x -timeout 90m ./...

## fuzz: run each fuzz target briefly
fuzz:
	@for t in $$($(GO) test -list 'Fuzz.*' ./ingest/ | grep ^Fuzz); do \
		$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime 20s ./ingest/ || exit 1; done
	@for t in $$($(GO) test -list 'Fuzz.*' ./query/ | grep ^Fuzz); do \
		$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime 20s ./query/ || exit 1; done

## bench-import: import of a generated 1M-event log into a fresh embedded
## store beside its baseline (import --decode-only of the same file),
## alternating, 3 rounds: wall, CPU, peak RSS, the store's size right after
## (scripts/bench-import.sh)
BENCH_EVENTS ?= 1000000
BENCH_DIR    ?= /tmp/auditlens-bench
BENCH_ROUNDS ?= 3
bench-import: chdb build
	CHDB_LIB_PATH=$(CHDB_LIB) BENCH_DIR=$(BENCH_DIR) BIN=$(BIN) scripts/bench-import.sh $(BENCH_ROUNDS) $(BENCH_EVENTS)

## bench-cost: what storing one event costs in CPU, split into decoding,
## the writer, the engine's insert and what the schema asks of the engine
## (residual, rollup, merges), on the generated 1M-event log
bench-cost: chdb
	cat /proc/loadavg
	CHDB_LIB_PATH=$(CHDB_LIB) $(GO) test -run '^$$' -bench IngestCost -benchtime 1x -count $(BENCH_ROUNDS) -timeout 60m ./ingest/
	cat /proc/loadavg

## bench-webhook: webhook events/s end to end (4 clients posting 400-event
## batches to serve) beside the decode-only rate of the same bodies
bench-webhook: chdb
	cat /proc/loadavg
	CHDB_LIB_PATH=$(CHDB_LIB) $(GO) test -run '^$$' -bench WebhookEndToEnd -benchtime 10x -count $(BENCH_ROUNDS) ./cmd/auditlens/
	cat /proc/loadavg

## bench-scan: scan of a 1 GB audit log (800k generated events + the seed
## incident at real time scale) beside one jq pass that extracts the
## watch-loop's raw material (scripts/watchloop.jq), alternating, 3 runs each
bench-scan: chdb build
	CHDB_LIB_PATH=$(CHDB_LIB) BENCH_DIR=$(BENCH_DIR) BIN=$(BIN) scripts/bench-scan.sh 3

## bench-scan-10g: scan of ten ~1 GB rotated files (8M events of one
## generated cluster) beside one jq pass over them
bench-scan-10g: chdb build
	CHDB_LIB_PATH=$(CHDB_LIB) BENCH_DIR=$(BENCH_DIR) BIN=$(BIN) scripts/bench-scan-10g.sh 1

## bench-export: export of a store imported from bench-scan's 1 GB log to
## NDJSON and to Parquet beside one jq -c . pass over the log, alternating,
## 3 runs each; checks the NDJSON export holds the log's lines
bench-export: chdb build
	CHDB_LIB_PATH=$(CHDB_LIB) BENCH_DIR=$(BENCH_DIR) BIN=$(BIN) scripts/bench-export.sh 3

## bench-store: the 100M-event store of the scale benchmarks: a large
## cluster's generated traffic (15,000 events/s, so one hour holds ~54M)
## plus the seed incident at real time scale (scripts/bench-store.sh)
BENCH_STORE        ?= /var/tmp/auditlens-100m
BENCH_STORE_EVENTS ?= 100000000
BENCH_STORE_RATE   ?= 15000
bench-store: chdb build
	CHDB_LIB_PATH=$(CHDB_LIB) BIN=$(BIN) scripts/bench-store.sh $(BENCH_STORE) $(BENCH_STORE_EVENTS) $(BENCH_STORE_RATE)

## bench-detect: every detector, one evaluation over the whole bench store
bench-detect: chdb bench-store
	CHDB_LIB_PATH=$(CHDB_LIB) AUDITLENS_DETECT_BENCH_STORE=$(BENCH_STORE) $(GO) test ./detect/detectors/ -run '^$$' -bench Detectors -benchtime 3x -count 3 -timeout 120m -detect.bench-events $(BENCH_STORE_EVENTS)

## bench-explorer: the timeline of the bench store's fullest hour in Chromium
bench-explorer: chdb chromium bench-store
	CHDB_LIB_PATH=$(CHDB_LIB) AUDITLENS_UI_BENCH_STORE=$(BENCH_STORE) $(GO) test ./cmd/auditlens/ -run '^$$' -bench UITimeline -benchtime 10x -count 3 -timeout 60m

clean:
	rm -rf bin
