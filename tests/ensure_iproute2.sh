#!/usr/bin/env bash
# The two-host test (tests/course/test_two_hosts.py) needs iproute2's `ip` and `tc`: install Debian's iproute2
# package when they are missing and we may (root, apt-get present). Quiet when they are there; else ONE
# line saying why the test will skip. Always exits 0 so that `make test` goes on.
set -u
if command -v ip >/dev/null 2>&1 && command -v tc >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "two-host test will skip: iproute2 (ip, tc) is missing and we cannot install it here"
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive  # bounded: a hung mirror must not hang `make test`
if ! { timeout 300 apt-get update -qq && timeout 300 apt-get install -y -qq --no-install-recommends iproute2; } \
    >/dev/null 2>&1; then
    echo "two-host test will skip: apt-get could not install iproute2"
fi
exit 0
