#!/usr/bin/env bash
# build.sh — make sure the pinned kube-apiserver, kube-controller-manager,
# etcd, etcd's snapshot tools (etcdctl, etcdutl), an OpenTelemetry
# Collector (otelcol), Prometheus Alertmanager (alertmanager) and an OpenID
# Connect provider (oidcop) and Helm (helm) are built in the user cache, and
# print the cache directory on stdout.
#
#   deploy/e2e/build.sh                  kube-apiserver, kube-controller-manager, etcd, etcdctl, etcdutl, otelcol, alertmanager, oidcop, helm
#   deploy/e2e/build.sh kube-scheduler   only the binaries named (also etcd, etcdctl, ...)
#   deploy/e2e/build.sh --print-dir      print the directory, build nothing
#
# Everything is built from the Go module proxy: a throwaway module in a temp
# directory requires k8s.io/kubernetes (staging modules replaced at the
# matching version) or go.etcd.io/etcd/{server,etcdctl,etcdutl}/v3, `go mod
# tidy`, `go build`; Alertmanager the same way from
# github.com/prometheus/alertmanager/cmd/alertmanager. The collector is the module in otelcol/ beside this
# script (its go.sum committed, so nothing is resolved): the filelog receiver
# and the otlphttp exporter, at the versions versions.env names. The OIDC
# provider is the module in oidcop/ (go.sum committed too): zitadel/oidc's
# example provider with a users file and a groups claim.
# Binaries land in ${XDG_CACHE_HOME:-$HOME/.cache}/auditlens/e2e/<kubernetes
# version>/ with a stamp recording the versions they were built from; a cached
# binary whose stamp matches is never rebuilt. Nothing is written inside the
# git clone. Versions live in versions.env beside this script (the Go tests
# read the same file).
#
# A fresh build takes 6-15 minutes on 2 cores, depending on their load:
# kube-apiserver 5.5-10, kube-controller-manager 2-4 more (it shares most
# packages), etcd ~1, etcdctl and etcdutl ~1 together (41 s and 14 s with an
# empty Go build cache, 6 s and 3 s after etcd was built; measured);
# otelcol adds 2-5 (3 CPU-minutes: 2 min 9 s with empty module and build
# caches, 4 min 44 s on a loaded machine; 18 s when the build cache holds its
# packages; measured); alertmanager adds 1-4 (3 min 33 s, 2 min 10 s of CPU,
# with an empty build cache on a loaded machine; 38 s when the build cache
# holds the packages it shares with the others; measured); oidcop adds
# under a minute.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$HERE/versions.env"
: "${KUBERNETES_VERSION:?versions.env sets no KUBERNETES_VERSION}"
: "${KUBERNETES_STAGING_VERSION:?versions.env sets no KUBERNETES_STAGING_VERSION}"
: "${ETCD_VERSION:?versions.env sets no ETCD_VERSION}"
: "${OTELCOL_VERSION:?versions.env sets no OTELCOL_VERSION}"
: "${OTELCOL_CONTRIB_VERSION:?versions.env sets no OTELCOL_CONTRIB_VERSION}"
: "${ALERTMANAGER_VERSION:?versions.env sets no ALERTMANAGER_VERSION}"
: "${ZITADEL_OIDC_VERSION:?versions.env sets no ZITADEL_OIDC_VERSION}"
: "${HELM_VERSION:?versions.env sets no HELM_VERSION}"
OTELCOL_SRC="$HERE/otelcol"
OIDCOP_SRC="$HERE/oidcop"

CACHE_DIR="${XDG_CACHE_HOME:-$HOME/.cache}/auditlens/e2e/$KUBERNETES_VERSION"
STAMP="$CACHE_DIR/stamp"

# The staging repositories published from k8s.io/kubernetes/staging; each one
# is replaced by its tagged module so that k8s.io/kubernetes resolves.
STAGING=(api apiextensions-apiserver apimachinery apiserver cli-runtime client-go
	cloud-provider cluster-bootstrap code-generator component-base component-helpers
	controller-manager cri-api cri-client cri-streaming csi-translation-lib dynamic-resource-allocation
	endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy
	kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission
	sample-apiserver sample-cli-plugin sample-controller streaming)

log() { echo "e2e-build: $*" >&2; }
die() {
	log "$*"
	exit 1
}

# RECIPE changes whenever the way a binary is built changes (flags, ldflags),
# so that cached binaries built the old way are rebuilt.
RECIPE=2

# stamp_line NAME prints the line the stamp holds for a binary built at the pinned versions.
stamp_line() {
	case "$1" in
	etcd) echo "etcd go.etcd.io/etcd/server/v3@$ETCD_VERSION recipe=$RECIPE" ;;
	etcdctl | etcdutl) echo "$1 go.etcd.io/etcd/$1/v3@$ETCD_VERSION recipe=$RECIPE" ;;
	alertmanager) echo "alertmanager github.com/prometheus/alertmanager@$ALERTMANAGER_VERSION recipe=$RECIPE" ;;
	helm) echo "helm helm.sh/helm/v4@$HELM_VERSION recipe=$RECIPE" ;;
	# The sources' hash: a changed main.go or go.sum rebuilds.
	otelcol) echo "otelcol collector@$OTELCOL_VERSION contrib@$OTELCOL_CONTRIB_VERSION src=$(cat "$OTELCOL_SRC/go.mod" "$OTELCOL_SRC/go.sum" "$OTELCOL_SRC/main.go" | sha256sum | cut -c1-16) recipe=$RECIPE" ;;
	oidcop) echo "oidcop zitadel/oidc@$ZITADEL_OIDC_VERSION src=$(cat "$OIDCOP_SRC/go.mod" "$OIDCOP_SRC/go.sum" "$OIDCOP_SRC/main.go" | sha256sum | cut -c1-16) recipe=$RECIPE" ;;
	*) echo "$1 k8s.io/kubernetes@$KUBERNETES_VERSION staging@$KUBERNETES_STAGING_VERSION recipe=$RECIPE" ;;
	esac
}

# cached NAME succeeds when the binary exists, is executable and its stamp matches.
cached() {
	[[ -x "$CACHE_DIR/$1" && -f "$STAMP" ]] && grep -qxF "$(stamp_line "$1")" "$STAMP"
}

record() {
	local line
	line="$(stamp_line "$1")"
	{
		[[ -f "$STAMP" ]] && grep -v "^$1 " "$STAMP" || true
		echo "$line"
	} >"$STAMP.tmp"
	mv "$STAMP.tmp" "$STAMP"
}

want=()
print_only=0
for arg in "$@"; do
	case "$arg" in
	--print-dir) print_only=1 ;;
	kube-apiserver | etcd | etcdctl | etcdutl | kube-controller-manager | kube-scheduler | kubemark | otelcol | alertmanager | oidcop | helm) want+=("$arg") ;;
	-h | --help)
		sed -n '2,30p' "$0" >&2
		exit 0
		;;
	*) die "unknown argument $arg (want kube-apiserver, etcd, etcdctl, etcdutl, kube-controller-manager, kube-scheduler, kubemark, otelcol, alertmanager, oidcop, helm or --print-dir)" ;;
	esac
done
if [[ $print_only == 1 ]]; then
	echo "$CACHE_DIR"
	exit 0
fi
# etcdctl and etcdutl: the rv-rollback scenarios snapshot and restore etcd
# with the real tools. otelcol: the OTLP test ships the audit log with it.
# alertmanager: the alerts test pushes findings to it. oidcop: the browser
# sign-in tests sign in with it. helm: the chart is linted, rendered and
# dry-run applied with it.
[[ ${#want[@]} -gt 0 ]] || want=(kube-apiserver kube-controller-manager kube-scheduler kubemark etcd etcdctl etcdutl otelcol alertmanager oidcop helm)

mkdir -p "$CACHE_DIR"
# One build at a time per cache directory (make e2e-bins and a test may race).
if command -v flock >/dev/null 2>&1; then
	exec 9>"$CACHE_DIR/.lock"
	flock 9
fi

missing=()
for b in "${want[@]}"; do
	cached "$b" || missing+=("$b")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	echo "$CACHE_DIR"
	exit 0
fi

command -v go >/dev/null 2>&1 || die "go is not on the PATH"
WORK="$(mktemp -d "$CACHE_DIR/build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
# The throwaway modules must not see a go.work or the caller's module.
export GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0

k8s_module() {
	local dir="$WORK/kubernetes"
	[[ -f "$dir/go.mod" ]] && return 0
	mkdir -p "$dir"
	{
		echo "module auditlens.local/e2e/kubernetes"
		echo
		echo "go 1.26"
		echo
		echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
		echo
		echo "replace ("
		for m in "${STAGING[@]}"; do
			echo "	k8s.io/$m => k8s.io/$m $KUBERNETES_STAGING_VERSION"
		done
		echo ")"
	} >"$dir/go.mod"
	cat >"$dir/tools.go" <<'GO'
//go:build tools

// Package tools pins the commands built from this throwaway module.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubemark"
)
GO
	log "resolving k8s.io/kubernetes $KUBERNETES_VERSION (go mod tidy)"
	(cd "$dir" && go mod tidy) || die "go mod tidy for k8s.io/kubernetes $KUBERNETES_VERSION failed"
}

etcd_module() {
	local dir="$WORK/etcd"
	mkdir -p "$dir"
	printf 'module auditlens.local/e2e/etcd\n\ngo 1.26\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$dir/go.mod"
	printf '//go:build tools\n\n// Package tools pins the command built from this throwaway module.\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$dir/tools.go"
	log "resolving go.etcd.io/etcd/server/v3 $ETCD_VERSION (go mod tidy)"
	(cd "$dir" && go mod tidy) || die "go mod tidy for etcd $ETCD_VERSION failed"
}

# etcd_tool_module NAME: a throwaway module requiring go.etcd.io/etcd/NAME/v3,
# whose main package is the module's root (etcdctl, etcdutl).
etcd_tool_module() {
	local dir="$WORK/$1"
	mkdir -p "$dir"
	printf 'module auditlens.local/e2e/%s\n\ngo 1.26\n\nrequire go.etcd.io/etcd/%s/v3 %s\n' "$1" "$1" "$ETCD_VERSION" >"$dir/go.mod"
	printf '//go:build tools\n\n// Package tools pins the command built from this throwaway module.\npackage tools\n\nimport _ "go.etcd.io/etcd/%s/v3"\n' "$1" >"$dir/tools.go"
	log "resolving go.etcd.io/etcd/$1/v3 $ETCD_VERSION (go mod tidy)"
	(cd "$dir" && go mod tidy) || die "go mod tidy for $1 $ETCD_VERSION failed"
}

# alertmanager_module: a throwaway module requiring
# github.com/prometheus/alertmanager, whose command is cmd/alertmanager. The
# module zip lacks the web UI's compiled assets (ui/app/dist, built by npm in
# Alertmanager's release), which ui/web.go embeds: the module is copied out of
# the module cache and replaced by the copy, with a placeholder page where the
# assets would be. The API the tests use does not need them.
alertmanager_module() {
	local dir="$WORK/alertmanager" src="$WORK/alertmanager-src" mod
	mkdir -p "$dir"
	(cd "$dir" && go mod download -json "github.com/prometheus/alertmanager@$ALERTMANAGER_VERSION" >"$WORK/am.json") ||
		die "downloading github.com/prometheus/alertmanager $ALERTMANAGER_VERSION failed"
	mod="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' "$WORK/am.json")"
	[[ -d "$mod" ]] || die "go mod download named no directory for alertmanager $ALERTMANAGER_VERSION"
	cp -r "$mod" "$src"
	chmod -R u+w "$src"
	for ui in elm mantine; do
		mkdir -p "$src/ui/app/dist/$ui"
		echo "<!doctype html><title>Alertmanager</title><p>Built by auditlens' deploy/e2e/build.sh without the web UI; the API is at /api/v2/." >"$src/ui/app/dist/$ui/index.html"
	done
	printf 'module auditlens.local/e2e/alertmanager\n\ngo 1.26\n\nrequire github.com/prometheus/alertmanager %s\n\nreplace github.com/prometheus/alertmanager => ../alertmanager-src\n' "$ALERTMANAGER_VERSION" >"$dir/go.mod"
	printf '//go:build tools\n\n// Package tools pins the command built from this throwaway module.\npackage tools\n\nimport _ "github.com/prometheus/alertmanager/cmd/alertmanager"\n' >"$dir/tools.go"
	log "resolving github.com/prometheus/alertmanager $ALERTMANAGER_VERSION (go mod tidy)"
	(cd "$dir" && go mod tidy) || die "go mod tidy for alertmanager $ALERTMANAGER_VERSION failed"
}

for b in "${missing[@]}"; do
	start=$SECONDS
	case "$b" in
	otelcol)
		for pin in "go.opentelemetry.io/collector/otelcol $OTELCOL_VERSION" \
			"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/filelogreceiver $OTELCOL_CONTRIB_VERSION"; do
			grep -qF "	$pin" "$OTELCOL_SRC/go.mod" ||
				die "$OTELCOL_SRC/go.mod does not require $pin as versions.env says: change both together (go get there, then go mod tidy)"
		done
		log "building otelcol $OTELCOL_VERSION (filelog receiver $OTELCOL_CONTRIB_VERSION, otlphttp exporter)"
		(cd "$OTELCOL_SRC" && go build -mod=readonly -trimpath -ldflags "-X main.version=$OTELCOL_VERSION" \
			-o "$WORK/otelcol.bin" .) || die "building otelcol failed"
		mv -f "$WORK/otelcol.bin" "$CACHE_DIR/otelcol"
		;;
	oidcop)
		grep -qF "	github.com/zitadel/oidc/v3 $ZITADEL_OIDC_VERSION" "$OIDCOP_SRC/go.mod" ||
			die "$OIDCOP_SRC/go.mod does not require github.com/zitadel/oidc/v3 $ZITADEL_OIDC_VERSION as versions.env says: change both together"
		log "building oidcop (zitadel/oidc $ZITADEL_OIDC_VERSION)"
		(cd "$OIDCOP_SRC" && go build -mod=readonly -trimpath -o "$WORK/oidcop.bin" .) || die "building oidcop failed"
		mv -f "$WORK/oidcop.bin" "$CACHE_DIR/oidcop"
		;;
	etcd)
		etcd_module
		log "building etcd $ETCD_VERSION"
		(cd "$WORK/etcd" && go build -trimpath -o "$WORK/etcd.bin" go.etcd.io/etcd/server/v3) ||
			die "building etcd failed"
		mv -f "$WORK/etcd.bin" "$CACHE_DIR/etcd"
		;;
	alertmanager)
		alertmanager_module
		log "building alertmanager $ALERTMANAGER_VERSION"
		# Version stamps as Prometheus' promu sets them, so that
		# /api/v2/status and --version name the release.
		(cd "$WORK/alertmanager" && go build -trimpath \
			-ldflags "-X github.com/prometheus/common/version.Version=${ALERTMANAGER_VERSION#v}" \
			-o "$WORK/alertmanager.bin" github.com/prometheus/alertmanager/cmd/alertmanager) ||
			die "building alertmanager failed"
		mv -f "$WORK/alertmanager.bin" "$CACHE_DIR/alertmanager"
		;;
	helm)
		dir="$WORK/helm"
		mkdir -p "$dir"
		printf 'module auditlens.local/e2e/helm\n\ngo 1.26\n\nrequire helm.sh/helm/v4 %s\n' "$HELM_VERSION" >"$dir/go.mod"
		printf '//go:build tools\n\n// Package tools pins the command built from this throwaway module.\npackage tools\n\nimport _ "helm.sh/helm/v4/cmd/helm"\n' >"$dir/tools.go"
		log "resolving helm.sh/helm/v4 $HELM_VERSION (go mod tidy)"
		(cd "$dir" && go mod tidy) || die "go mod tidy for helm $HELM_VERSION failed"
		log "building helm $HELM_VERSION"
		(cd "$dir" && go build -trimpath -ldflags "-X helm.sh/helm/v4/internal/version.version=$HELM_VERSION" \
			-o "$WORK/helm.bin" helm.sh/helm/v4/cmd/helm) || die "building helm failed"
		mv -f "$WORK/helm.bin" "$CACHE_DIR/helm"
		;;
	etcdctl | etcdutl)
		etcd_tool_module "$b"
		log "building $b $ETCD_VERSION"
		(cd "$WORK/$b" && go build -trimpath -o "$WORK/$b.bin" "go.etcd.io/etcd/$b/v3") ||
			die "building $b failed"
		mv -f "$WORK/$b.bin" "$CACHE_DIR/$b"
		;;
	*)
		k8s_module
		minor="${KUBERNETES_VERSION#v*.}"
		minor="${minor%%.*}"
		# Version stamps as Kubernetes' own build sets them (hack/lib/version.sh),
		# so that --version and the user agents of the apiserver's loopback
		# clients read "kube-apiserver/v1.37.2 (linux/amd64) kubernetes/unknown"
		# (the module proxy does not tell the commit).
		ldflags=""
		for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
			ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
			ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit="
		done
		log "building $b $KUBERNETES_VERSION"
		(cd "$WORK/kubernetes" && go build -trimpath -ldflags "$ldflags" \
			-o "$WORK/$b.bin" "k8s.io/kubernetes/cmd/$b") || die "building $b failed"
		mv -f "$WORK/$b.bin" "$CACHE_DIR/$b"
		;;
	esac
	record "$b"
	log "built $CACHE_DIR/$b in $((SECONDS - start))s"
done
echo "$CACHE_DIR"
