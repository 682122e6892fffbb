#!/usr/bin/env bash
# Make sure headless Chromium is there for the browser tests (tests/browser/), installing Debian's
# `chromium` package when it is missing and we may (root, apt-get present). Idempotent and quiet:
# prints nothing when the browser is (or becomes) available, else ONE line saying why, which the
# tests show as their skip reason. Always exits 0 so that `make test` goes on to run the tests.
# Try it:  bash tests/browser/ensure_browser.sh; echo "rc=$?"
set -u
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
REASON_FILE="${BROWSER_SKIP_FILE:-artifacts/browser/skip_reason.txt}"
mkdir -p "$(dirname "$REASON_FILE")"
rm -f "$REASON_FILE"

say_why() {  # one clear line on stdout, and the same line for the tests to read
    echo "browser tests will skip: $1"
    echo "$1" >"$REASON_FILE"
}

if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    say_why "$CHROMIUM is missing and we are not root to install it (run: sudo apt-get install -y chromium)"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    say_why "$CHROMIUM is missing and there is no apt-get here to install Debian's chromium package"
    exit 0
fi
# Bounded: a hung mirror must not hang `make test`.
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
if timeout 300 apt-get update -qq >"$log" 2>&1 \
    && timeout 600 apt-get install -y -qq --no-install-recommends chromium >>"$log" 2>&1; then
    rm -f "$log"
    [ -x "$CHROMIUM" ] || say_why "apt-get installed chromium, but $CHROMIUM is still missing"
    exit 0
fi
say_why "could not install chromium with apt-get ($(tail -n 1 "$log" | tr -d '\r' | cut -c1-160))"
rm -f "$log"
exit 0
