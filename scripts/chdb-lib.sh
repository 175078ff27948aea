#!/usr/bin/env bash
# chdb-lib.sh — make sure the pinned libchdb.so (the embedded ClickHouse
# engine) is in the user cache, and print its path on stdout.
#
#   scripts/chdb-lib.sh            fetch once; afterwards only print the path
#   scripts/chdb-lib.sh --verify   also check the sha256 of a cached copy
#
# The library ships inside the npm package @chdb/lib-linux-x64-gnu. `npm pack`
# downloads the tarball without installing anything; both the tarball and the
# .so inside are checked against the pinned sha256 sums below before the file
# is renamed into place, so a partial or tampered download never lands in the
# cache. Nothing is written inside the git clone.
#
# Keep LIB_VERSION in step with chdb.LibVersion in store/chdb/lib.go.
set -euo pipefail

LIB_VERSION="26.7.3-stable.1"
NPM_PACKAGE="@chdb/lib-linux-x64-gnu"
TARBALL_SHA256="c0d32b129e988f2b9a9a31c9141aecf5e1e2453f9a079efc4d36ab8e3f92b2ad"
SO_SHA256="36ad4e999882821ef13cf2d0f52c93f48e6ee1b4498b35a201c23ce4b8d15bf5"

CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/auditlens/chdb"
CACHE_DIR="$CACHE_ROOT/$LIB_VERSION"
DEST="$CACHE_DIR/libchdb.so"

die() {
	echo "chdb-lib: $*" >&2
	exit 1
}

usage() {
	echo "usage: $0 [--verify]" >&2
	exit 2
}

verify=0
case "${1:-}" in
"") ;;
--verify) verify=1 ;;
-h | --help) usage ;;
*) usage ;;
esac
[[ $# -le 1 ]] || usage

# sha256_of FILE prints the hex sha256 of FILE.
sha256_of() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum "$1" | cut -d' ' -f1
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 "$1" | cut -d' ' -f1
	else
		die "need sha256sum or shasum to verify downloads"
	fi
}

# check_sha256 FILE WANT NAME fails unless FILE hashes to WANT.
check_sha256() {
	local got
	got="$(sha256_of "$1")"
	[[ "$got" == "$2" ]] || die "$3: sha256 $got, want $2"
}

if [[ -s "$DEST" ]]; then
	if [[ $verify -eq 1 ]]; then
		check_sha256 "$DEST" "$SO_SHA256" \
			"cached $DEST (remove it and run $0 again to re-fetch)"
		echo "chdb-lib: $DEST verified" >&2
	fi
	echo "$DEST"
	exit 0
fi

command -v npm >/dev/null 2>&1 ||
	die "npm is needed to fetch $NPM_PACKAGE@$LIB_VERSION; install Node.js/npm, or download libchdb.so yourself and point --chdb-lib or CHDB_LIB_PATH at it"
command -v tar >/dev/null 2>&1 || die "tar is needed to unpack $NPM_PACKAGE"

mkdir -p "$CACHE_DIR"
# The staging directory sits next to the destination so the final mv is a
# rename(2) within one file system: readers see no file or the whole file.
tmp="$(mktemp -d "$CACHE_ROOT/.fetch.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

echo "chdb-lib: fetching $NPM_PACKAGE@$LIB_VERSION (about 180 MB) ..." >&2
# npm prints the tarball name on stdout; keep stdout for the path alone. A
# private npm cache keeps a second copy of the tarball out of ~/.npm.
(cd "$tmp" && npm pack --loglevel=warn --cache "$tmp/npm-cache" --pack-destination "$tmp" \
	"$NPM_PACKAGE@$LIB_VERSION" >&2) ||
	die "npm pack $NPM_PACKAGE@$LIB_VERSION failed"

shopt -s nullglob
tarballs=("$tmp"/*.tgz)
shopt -u nullglob
[[ ${#tarballs[@]} -eq 1 ]] || die "npm pack left ${#tarballs[@]} tarballs in $tmp, want 1"
tarball="${tarballs[0]}"

check_sha256 "$tarball" "$TARBALL_SHA256" "tarball $(basename "$tarball")"
tar -xzf "$tarball" -C "$tmp" package/libchdb.so ||
	die "tarball $(basename "$tarball") has no package/libchdb.so"
rm -f "$tarball"
check_sha256 "$tmp/package/libchdb.so" "$SO_SHA256" "package/libchdb.so"

chmod 0755 "$tmp/package/libchdb.so"
mv -f "$tmp/package/libchdb.so" "$DEST"
echo "chdb-lib: installed $DEST" >&2
echo "$DEST"
