#!/usr/bin/env bash
# Runs a 64-bit Windows program under Wine, quietly, in ortops' own Wine prefix:
#
#   scripts/wine.sh PROGRAM.exe [ARGS...]
#
# Needs Debian's wine64 (apt-get install wine64), which installs the loader as
# /usr/lib/wine/wine64 (the wine package would also put it on PATH). The prefix is WINEPREFIX,
# by default build/windows/wine, made on first use (about 20 s, 700 MB); Wine's own messages
# are off unless WINEDEBUG says otherwise. Windows finds the DLLs a program imports in its
# own folder, then in WINEPATH's folders (Windows paths, or Unix paths, which Wine maps to
# drive Z:). cmake/x86_64-w64-mingw32.cmake makes this the emulator of cross builds.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
loader=$(command -v wine64 || true)
[[ -n "$loader" ]] || loader=/usr/lib/wine/wine64
if [[ ! -x "$loader" ]]; then
  echo "wine.sh: no wine64 (apt-get install wine64)" >&2
  exit 127
fi
export WINEPREFIX=${WINEPREFIX:-$ROOT/build/windows/wine}
export WINEDEBUG=${WINEDEBUG:--all}
export WINEDLLOVERRIDES=${WINEDLLOVERRIDES:-mscoree,mshtml=}  # no Mono or Gecko to offer installing

# The first program to run makes the prefix; two doing it at once would both write it.
if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
  mkdir -p "$(dirname "$WINEPREFIX")"
  (
    flock 9
    if [[ ! -f "$WINEPREFIX/system.reg" ]]; then
      echo "wine.sh: making the Wine prefix $WINEPREFIX (once)" >&2
      "$loader" wineboot --init >/dev/null 2>&1 || true
      "$(dirname "$loader")/wineserver" -w 2>/dev/null || true  # until the registry is written
      [[ -f "$WINEPREFIX/system.reg" ]] || { echo "wine.sh: could not make $WINEPREFIX" >&2; exit 1; }
    fi
  ) 9>"$WINEPREFIX.lock"
fi
exec "$loader" "$@"
