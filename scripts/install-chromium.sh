#!/usr/bin/env bash
# Install Debian's Chromium, the headless browser tests/test_seal_html.py opens report.html in, and the
# DejaVu fonts the timeline SVGs name (matplotlib lays their text out with DejaVu Sans).
#
#   scripts/install-chromium.sh        # no-op when $NSYSAUDIT_CHROMIUM (default /usr/bin/chromium) runs
#
# Uses the system's apt (CI runs as root on a fresh Debian machine; elsewhere `sudo -n` is tried).
# Never downloads a browser from anywhere else (no `playwright install`).
set -euo pipefail

CHROMIUM="${NSYSAUDIT_CHROMIUM:-/usr/bin/chromium}"
T0=$SECONDS

log() { printf 'install-chromium: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

ready() { [[ -x "$CHROMIUM" ]] && "$CHROMIUM" --version 2>/dev/null | grep -q Chromium; }

if ready; then
    "$CHROMIUM" --version
    exit 0
fi
command -v apt-get >/dev/null || die "$CHROMIUM not found and no apt-get: install Chromium, or set NSYSAUDIT_CHROMIUM"
SUDO=()
if [[ "$(id -u)" != 0 ]]; then
    command -v sudo >/dev/null && sudo -n true 2>/dev/null ||
        die "$CHROMIUM not found; installing it needs root (apt-get install chromium fonts-dejavu-core)"
    SUDO=(sudo -n)
fi
APT=("${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 -qq)
log "apt-get install chromium fonts-dejavu-core"
"${APT[@]}" update >/dev/null
"${APT[@]}" install -y --no-install-recommends chromium fonts-dejavu-core >/dev/null
ready || die "chromium installed but $CHROMIUM --version fails"
log "installed in $((SECONDS - T0)) s"
"$CHROMIUM" --version
