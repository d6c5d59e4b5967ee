#!/usr/bin/env bash
# System libraries the test suite needs on a fresh Debian/Ubuntu machine, installed only when
# missing and only as root (elsewhere it prints what to install):
# - Qt's offscreen platform (the desktop app's tests run real widgets) needs EGL/GL, fontconfig,
#   freetype, xkbcommon, D-Bus and GLib;
# - the start-on-login test validates its desktop entry with desktop-file-validate.
set -u
pkgs=""
for pair in libEGL.so.1:libegl1 libGL.so.1:libgl1 libfontconfig.so.1:libfontconfig1 \
            libfreetype.so.6:libfreetype6 libxkbcommon.so.0:libxkbcommon0 libdbus-1.so.3:libdbus-1-3 \
            libglib-2.0.so.0:libglib2.0-0; do
  ldconfig -p 2>/dev/null | grep -q "${pair%%:*}" || pkgs="$pkgs ${pair##*:}"
done
[ -n "$pkgs" ] && pkgs="$pkgs fonts-dejavu-core"
command -v desktop-file-validate >/dev/null 2>&1 || pkgs="$pkgs desktop-file-utils"
[ -z "$pkgs" ] && exit 0
if [ "$(uname -s)" = Linux ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing system libraries for the tests:$pkgs"
  { apt-get update -qq && apt-get install -y -qq $pkgs; } >/dev/null 2>&1 \
    || echo "could not install:$pkgs (the tests that need them will fail or skip)"
else
  echo "the tests need these system packages (Debian names):$pkgs"
fi
exit 0
