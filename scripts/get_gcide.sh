#!/bin/sh
# Fetches GCIDE, the GNU Collaborative International Dictionary of English (Debian package
# dict-gcide, GPL; about 40 MB of English text once unpacked), into a folder without installing
# it: `apt-get download` + `dpkg-deb -x`. Does nothing when the folder already has it. Prints the
# path of gcide.dict.dz (dictzip, which is gzip: `gdp prepare` and `gdp train` read it as it is).
#
# usage: scripts/get_gcide.sh [DIR]        (default: data_cache/gcide)
# needs: Debian's apt-get and dpkg-deb, and apt lists (run 'apt-get update' once as root).
set -eu
dest=${1:-data_cache/gcide}
dz="$dest/gcide.dict.dz"
if [ -s "$dz" ]; then
    echo "$dz"
    exit 0
fi
for tool in apt-get dpkg-deb; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "get_gcide: '$tool' not found: this script needs Debian's apt tools (or put gcide.dict.dz in $dest yourself)" >&2
        exit 1
    fi
done
mkdir -p "$dest"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/get_gcide.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
if ! (cd "$tmp" && apt-get download dict-gcide) >"$tmp/log" 2>&1 &&
    ! { [ "$(id -u)" = 0 ] && apt-get update -qq >>"$tmp/log" 2>&1 &&
        (cd "$tmp" && apt-get download dict-gcide) >>"$tmp/log" 2>&1; }; then
    cat "$tmp/log" >&2
    echo "get_gcide: 'apt-get download dict-gcide' failed: run 'apt-get update' (as root) first, and check that a Debian mirror is reachable" >&2
    exit 1
fi
deb=$(ls "$tmp"/dict-gcide_*.deb)
dpkg-deb -x "$deb" "$tmp/x"
src="$tmp/x/usr/share/dictd/gcide.dict.dz"
if [ ! -s "$src" ]; then
    echo "get_gcide: $deb holds no usr/share/dictd/gcide.dict.dz: the package layout changed" >&2
    exit 1
fi
# the licence travels with the data
cp "$tmp/x/usr/share/doc/dict-gcide/copyright" "$dest/copyright" 2>/dev/null || true
mv "$src" "$dz.tmp"
mv "$dz.tmp" "$dz"
echo "get_gcide: $(wc -c <"$dz") bytes (compressed) from $(basename "$deb")" >&2
echo "$dz"
