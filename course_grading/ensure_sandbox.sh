#!/usr/bin/env bash
# Make sure bubblewrap (Debian's `bubblewrap` package: the `bwrap` command) is there for the grading
# sandbox (course_grading/sandbox.py), installing it when it is missing and we may (Linux, root,
# apt-get present). Idempotent and quiet: prints nothing when bwrap is (or becomes) available, else ONE
# line saying why. Exits 0 when bwrap is there, 1 when it is not. `make instructor` and the grading
# tests run it. Try it:  bash course_grading/ensure_sandbox.sh; echo "rc=$?"
set -u
if command -v bwrap >/dev/null 2>&1; then
    exit 0
fi
if [ "$(uname -s)" != "Linux" ]; then
    echo "no grading sandbox: bubblewrap needs Linux, this is $(uname -s)"
    exit 1
fi
if [ "$(id -u)" != "0" ]; then
    echo "no grading sandbox: bwrap is missing and we are not root to install it (run: sudo apt-get install -y bubblewrap)"
    exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
    echo "no grading sandbox: bwrap is missing and there is no apt-get here to install Debian's bubblewrap package"
    exit 1
fi
# One install at a time: test workers that start together each call this, and a second apt-get meets
# the first one's lock ("Unable to lock directory /var/lib/apt/lists/") and would skip the sandbox tests.
exec 9>/var/lock/course-ensure-sandbox.lock
flock -w 600 9
if command -v bwrap >/dev/null 2>&1; then
    exit 0  # the caller before us installed it
fi
export DEBIAN_FRONTEND=noninteractive
log="$(mktemp)"
if timeout 300 apt-get update -qq >"$log" 2>&1 \
    && timeout 300 apt-get install -y -qq --no-install-recommends bubblewrap >>"$log" 2>&1 \
    && command -v bwrap >/dev/null 2>&1; then
    rm -f "$log"
    exit 0
fi
echo "no grading sandbox: could not install bubblewrap with apt-get ($(tail -n 1 "$log" | tr -d '\r' | cut -c1-160))"
rm -f "$log"
exit 1
