#!/bin/sh
# Installs Debian's Chromium for the browser tests of the UI
# (cmd/auditlens/ui_test.go), when it is not there yet. The browser comes from
# the distribution, not from a test tool's download (those fail offline).
set -eu
if [ -x /usr/bin/chromium ]; then
	exit 0
fi
SUDO=
if [ "$(id -u)" != 0 ]; then
	SUDO=sudo
fi
echo "installing chromium (apt-get) for the UI browser tests" >&2
$SUDO apt-get install -y --no-install-recommends chromium >/dev/null 2>&1 || {
	$SUDO apt-get update >/dev/null
	$SUDO apt-get install -y --no-install-recommends chromium >/dev/null
}
/usr/bin/chromium --version >&2
