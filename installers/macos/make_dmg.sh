#!/bin/sh
# Pack Hearth.app into a compressed disk image with an Applications link to drag it onto.
#   sh installers/macos/make_dmg.sh dist/Hearth.app dist/Hearth-<version>-macos-arm64.dmg
# Needs macOS (hdiutil). `make installer` runs it after PyInstaller has built Hearth.app.
set -eu
app=$1
out=$2
[ -d "$app" ] || { echo "make_dmg.sh: $app does not exist: build it first (make installer)" >&2; exit 1; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -R "$app" "$stage/"
ln -s /Applications "$stage/Applications"
rm -f "$out"
hdiutil create -volname Hearth -srcfolder "$stage" -fs HFS+ -format UDZO -ov "$out"
echo "$out"
