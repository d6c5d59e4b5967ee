#!/bin/sh
# Add Hearth to this user's application menu (./install.sh), or take it out (./install.sh --uninstall).
# Hearth runs from this folder: to move it, move the folder, then run this again.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
data="${XDG_DATA_HOME:-$HOME/.local/share}"
entry="$data/applications/hearth.desktop"
icon="$data/icons/hicolor/256x256/apps/hearth.png"
if [ "${1:-}" = "--uninstall" ]; then
    rm -f "$entry" "$icon"
    echo "Hearth is no longer in the application menu (this folder is left as it is)."
    exit 0
fi
# The Exec line quotes the path; these characters would need escapes there.
if printf '%s' "$here" | grep -q '[\"`$%]'; then
    echo "install.sh: move Hearth to a folder whose path has none of \\ \" \` \$ %, then run this again" >&2
    exit 1
fi
mkdir -p "$(dirname "$entry")" "$(dirname "$icon")"
cp "$here/hearth.png" "$icon"
sed '/^Exec=/d' "$here/hearth.desktop" > "$entry.partial"
printf 'Exec="%s/hearth" app\n' "$here" >> "$entry.partial"
mv "$entry.partial" "$entry"
command -v update-desktop-database >/dev/null 2>&1 && update-desktop-database "$(dirname "$entry")" 2>/dev/null || true
echo "Hearth is in the application menu: $entry"
