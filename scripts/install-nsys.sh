#!/usr/bin/env bash
# Install the real NVIDIA Nsight Systems CLI (2023.4.4) into a private folder, from Debian's
# non-free component (packages nsight-systems + nsight-systems-target), without touching the
# system's apt configuration or dpkg database.
#
#   scripts/install-nsys.sh            # installs into $NSYSAUDIT_TOOLS or <repo>/.tools/nsys
#
# Layout produced (the two folders must sit side by side for `nsys` to find its host half):
#   <dir>/target-linux-x64/nsys       the CLI (profile, export, stats)
#   <dir>/host-linux-x64/             QdstrmImporter, exporter libs, `nsys stats` reports
#
# Idempotent: if a working install is already there it only prints its version and path.
# Environment knobs (all optional):
#   NSYSAUDIT_TOOLS              install folder (default <repo>/.tools/nsys)
#   NSYSAUDIT_DEBIAN_MIRROR      Debian archive URI (default: the one in /etc/apt sources)
#   NSYSAUDIT_NSYS_SUITE         suite that carries the wanted version (default trixie)
#   NSYSAUDIT_NSYS_DEB_VERSION   exact Debian version to fetch (default 2023.4.4.54~12.4.1-2)
#   NSYSAUDIT_NSYS_FORCE=1       reinstall even if a working install is present
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${NSYSAUDIT_TOOLS:-$REPO/.tools/nsys}"
NSYS_SUITE="${NSYSAUDIT_NSYS_SUITE:-trixie}"
DEB_VERSION="${NSYSAUDIT_NSYS_DEB_VERSION:-2023.4.4.54~12.4.1-2}"
WANT="2023.4"            # what `nsys --version` must report
STAMP=".nsysaudit-install"
NSYS="$DEST/target-linux-x64/nsys"
T0=$SECONDS

log() { printf 'install-nsys: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

finish() {
    "$NSYS" --version
    echo "$NSYS"
}

is_ready() {
    [[ -f "$DEST/$STAMP" && -x "$NSYS" && -x "$DEST/host-linux-x64/QdstrmImporter" ]] || return 1
    "$NSYS" --version 2>/dev/null | grep -q "version $WANT" || return 1
    ! ldd "$DEST/host-linux-x64/QdstrmImporter" 2>/dev/null | grep -q 'not found'
}

if [[ "${NSYSAUDIT_NSYS_FORCE:-0}" != 1 ]] && is_ready; then
    finish
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# Preconditions
for tool in apt-get apt-cache dpkg dpkg-deb ldd ldconfig flock; do
    command -v "$tool" >/dev/null || die "'$tool' not found: this script needs a Debian system"
done
ARCH="$(dpkg --print-architecture)"
[[ "$ARCH" == amd64 ]] || die "Nsight Systems x64 CLI needs amd64, this machine is $ARCH"

mkdir -p "$(dirname "$DEST")"
exec 9>"$DEST.lock"
flock 9                                   # serialise concurrent installers
if [[ "${NSYSAUDIT_NSYS_FORCE:-0}" != 1 ]] && is_ready; then finish; exit 0; fi

# shellcheck disable=SC1091
CODENAME="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"

# ---------------------------------------------------------------------------------------------
# Which Debian archive to use: the one the system already uses for its own release.
# Prints "URI<TAB>SIGNED_BY" (SIGNED_BY may be empty).
find_mirror() {
    local f
    {
        for f in /etc/apt/sources.list.d/*.sources; do
            [[ -f "$f" ]] || continue
            awk -v want="$CODENAME" '
                function flush() {
                    if (uris != "" && enabled != "no" && types ~ /(^| )deb( |$)/) {
                        n = split(suites, s, " ")
                        for (i = 1; i <= n; i++) if (s[i] == want) {
                            split(uris, u, " "); print u[1] "\t" signed; break
                        }
                    }
                    uris = ""; suites = ""; types = ""; enabled = ""; signed = ""
                }
                /^[ \t]*#/ { next }
                /^[ \t]*$/ { flush(); next }
                /^[^ \t]/ {
                    key = tolower($1); sub(/:$/, "", key)
                    val = $0; sub(/^[^:]*:[ \t]*/, "", val)
                    if (key == "uris") uris = val
                    else if (key == "suites") suites = val
                    else if (key == "types") types = val
                    else if (key == "enabled") enabled = tolower(val)
                    else if (key == "signed-by" && val ~ /^\//) signed = val
                }
                END { flush() }' "$f"
        done
        for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
            [[ -f "$f" ]] || continue
            awk -v want="$CODENAME" '
                $1 != "deb" { next }
                {
                    line = $0; signed = ""
                    if (match(line, /signed-by=[^] ]+/)) signed = substr(line, RSTART + 10, RLENGTH - 10)
                    sub(/^[ \t]*deb[ \t]+/, "", line); sub(/^\[[^]]*\][ \t]*/, "", line)
                    split(line, w, /[ \t]+/)
                    if (w[2] == want) print w[1] "\t" signed
                }' "$f"
        done
    } | grep -v -i -e security -e '^[^[:space:]]*ubuntu' | head -n 1
}

if [[ -n "${NSYSAUDIT_DEBIAN_MIRROR:-}" ]]; then
    MIRROR="$NSYSAUDIT_DEBIAN_MIRROR"
    SIGNED_BY=""
else
    [[ -n "$CODENAME" ]] || die "no VERSION_CODENAME in /etc/os-release; set NSYSAUDIT_DEBIAN_MIRROR"
    line="$(find_mirror || true)"
    [[ -n "$line" ]] || die "no Debian source for '$CODENAME' in /etc/apt; set NSYSAUDIT_DEBIAN_MIRROR"
    MIRROR="${line%%$'\t'*}"
    SIGNED_BY="${line#*$'\t'}"
fi
MIRROR="${MIRROR%/}"
if [[ -z "$SIGNED_BY" && -f /usr/share/keyrings/debian-archive-keyring.gpg ]]; then
    SIGNED_BY=/usr/share/keyrings/debian-archive-keyring.gpg
fi

# ---------------------------------------------------------------------------------------------
# Private apt: own config (system apt.conf.d is NOT read), own sources, lists and cache.
rm -rf "$DEST".partial.*                 # leftovers of interrupted runs (we hold the lock)
WORK="$(mktemp -d "$DEST.partial.XXXXXX")"
cleanup() { rm -rf "$WORK"; }
trap cleanup EXIT

mkdir -p "$WORK/apt/conf.d" "$WORK/apt/sources.d" "$WORK/apt/prefs.d" \
    "$WORK/apt/state/lists/partial" "$WORK/apt/cache/archives/partial" "$WORK/debs" "$WORK/x"

LIB_SUITE="${CODENAME:-$NSYS_SUITE}"   # libraries QdstrmImporter needs come from the system's own release
{
    signed_line=""
    [[ -n "$SIGNED_BY" ]] && signed_line="Signed-By: $SIGNED_BY"
    if [[ "$LIB_SUITE" == "$NSYS_SUITE" ]]; then
        printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main contrib non-free\n%s\n' \
            "$MIRROR" "$NSYS_SUITE" "$signed_line"
    else
        printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: contrib non-free\n%s\n\n' \
            "$MIRROR" "$NSYS_SUITE" "$signed_line"
        printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\n%s\n' \
            "$MIRROR" "$LIB_SUITE" "$signed_line"
    fi
} >"$WORK/apt/private.sources"

{
    cat <<EOF
Dir::Etc::main "/dev/null";
Dir::Etc::parts "$WORK/apt/conf.d";
Dir::Etc::sourcelist "$WORK/apt/private.sources";
Dir::Etc::sourceparts "$WORK/apt/sources.d";
Dir::Etc::preferences "$WORK/apt/preferences";
Dir::Etc::preferencesparts "$WORK/apt/prefs.d";
Dir::State "$WORK/apt/state";
Dir::State::status "/dev/null";
Dir::Cache "$WORK/apt/cache";
APT::Architecture "$ARCH";
APT::Architectures { "$ARCH"; };
APT::Sandbox::User "$(id -un)";
Acquire::Languages "none";
Acquire::Retries "3";
EOF
    # Keep the system's network-related apt settings (proxies, snapshot date checks).
    apt-config dump 2>/dev/null |
        grep -E '^Acquire::(https?::Proxy|Check-Valid-Until|Check-Date|ForceIPv4|ForceIPv6) ' || true
} >"$WORK/apt/apt.conf"
export APT_CONFIG="$WORK/apt/apt.conf"

log "package lists: $NSYS_SUITE contrib non-free${LIB_SUITE:+, $LIB_SUITE main} from $MIRROR"
apt-get -qq update >"$WORK/apt/update.log" 2>&1 || { cat "$WORK/apt/update.log" >&2; die "apt-get update failed"; }

# Exact version when the archive still has it, else the suite's 2023.4.x candidate.
if apt-cache show "nsight-systems-target=$DEB_VERSION" >/dev/null 2>&1 &&
    apt-cache show "nsight-systems=$DEB_VERSION" >/dev/null 2>&1; then
    VER="$DEB_VERSION"
else
    VER="$(apt-cache show nsight-systems-target 2>/dev/null | awk '/^Version:/ { print $2; exit }')"
    [[ "$VER" == "$WANT".* ]] ||
        die "nsight-systems $DEB_VERSION not in $NSYS_SUITE (candidate: '${VER:-none}')"
    log "WARNING: $DEB_VERSION gone from the archive; using $VER"
fi

# libssh.so.4 (QdstrmImporter) and anything it needs that this machine lacks.
declare -A SONAME_PKG=(
    [libssh.so.4]=libssh-4 [libssl.so.3]=libssl3 [libcrypto.so.3]=libssl3
    [libgssapi_krb5.so.2]=libgssapi-krb5-2 [libkrb5.so.3]=libkrb5-3 [libk5crypto.so.3]=libk5crypto3
    [libkrb5support.so.0]=libkrb5support0 [libcom_err.so.2]=libcom-err2
    [libkeyutils.so.1]=libkeyutils1 [libz.so.1]=zlib1g
)

log "downloading nsight-systems{,-target} $VER"
cd "$WORK/debs"
apt-get -qq download "nsight-systems-target=$VER" "nsight-systems=$VER" >/dev/null 2>"$WORK/apt/dl.log" ||
    { cat "$WORK/apt/dl.log" >&2; die "download failed"; }

log "extracting"
for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$WORK/x"; done
rm -f "$WORK"/debs/*.deb

ROOT="$WORK/root"
mkdir -p "$ROOT"
mv "$WORK/x/usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64" "$ROOT/"
mv "$WORK/x/usr/lib/nsight-systems/host-linux-x64" "$ROOT/"
HOST="$ROOT/host-linux-x64"
# `nsys stats` report scripts import these (Debian installs them into dist-packages).
mkdir -p "$HOST/python/lib"
for py in nsysstats.py gpustats.py; do
    src="$WORK/x/usr/lib/python3/dist-packages/$py"
    [[ -f "$src" ]] || src="$ROOT/target-linux-x64/python/lib/$py"
    [[ -f "$HOST/python/lib/$py" ]] || cp "$src" "$HOST/python/lib/$py"
done
rm -rf "$WORK/x"

missing_libs() {
    ldd "$HOST/QdstrmImporter" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u
}
link_libssh() {
    # Debian ships host-linux-x64/libssh.so -> libssh.so.4 -> ../../x86_64-linux-gnu/libssh.so.4,
    # which dangles outside /usr/lib. Point libssh.so.4 at a real copy (fetched beside it, or the
    # system's own) and keep libssh.so -> libssh.so.4 (QdstrmImporter asks for libssh.so).
    if [[ ! -e "$HOST/libssh.so.4" ]]; then
        local sys
        sys="$(ldconfig -p | awk '$1 == "libssh.so.4" && /x86-64/ { print $NF; exit }')"
        [[ -z "$sys" ]] || ln -sfn "$sys" "$HOST/libssh.so.4"
    fi
    ln -sfn libssh.so.4 "$HOST/libssh.so"
}

link_libssh
for round in 1 2 3; do
    mapfile -t miss < <(missing_libs)
    ((${#miss[@]})) || break
    pkgs=()
    for so in "${miss[@]}"; do
        [[ "$so" == libssh.so ]] && so=libssh.so.4
        pkg="${SONAME_PKG[$so]:-}"
        [[ -n "$pkg" ]] || die "QdstrmImporter needs $so and no package is known for it"
        pkgs+=("$pkg")
    done
    mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
    log "fetching from $LIB_SUITE (round $round): ${pkgs[*]}"
    rm -rf "$WORK/libx"
    mkdir -p "$WORK/libx"
    (cd "$WORK/debs" && apt-get -qq download "${pkgs[@]/%//$LIB_SUITE}" >/dev/null 2>"$WORK/apt/dl.log") ||
        { cat "$WORK/apt/dl.log" >&2; die "download of ${pkgs[*]} failed"; }
    for deb in "$WORK"/debs/*.deb; do dpkg -x "$deb" "$WORK/libx"; done
    rm -f "$WORK"/debs/*.deb
    # Copy shared objects beside QdstrmImporter, replacing only names that do not resolve.
    while IFS= read -r -d '' lib; do
        dst="$HOST/${lib##*/}"
        [[ -e "$dst" ]] || { rm -f "$dst"; cp -a "$lib" "$dst"; }
    done < <(find "$WORK/libx" \( -type f -o -type l \) -name 'lib*.so.*' -print0)
    link_libssh
done
mapfile -t miss < <(missing_libs)
((${#miss[@]} == 0)) || die "QdstrmImporter still misses: ${miss[*]}"

"$ROOT/target-linux-x64/nsys" --version 2>/dev/null | grep -q "version $WANT" ||
    die "extracted nsys does not run: $("$ROOT/target-linux-x64/nsys" --version 2>&1 | head -n 3)"

printf 'nsight-systems %s (%s, %s)\ninstalled %s\n' "$VER" "$NSYS_SUITE" "$MIRROR" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$ROOT/$STAMP"

rm -rf "$DEST"
mv "$ROOT" "$DEST"
log "installed in $((SECONDS - T0)) s"
finish
