#!/bin/sh
# System packages the test suite needs (Debian/Ubuntu): the peer allocators
# (jemalloc, gperftools' tcmalloc, mimalloc), sqlite3, g++ and git for the preload shim's
# real-program tests, clang-format for the C formatting check, clang for the
# libFuzzer targets (make fuzz). Installs only
# what is missing; needs root (or sudo) when something is.
set -e
missing=""
have_lib() { ls /usr/lib/*-linux-gnu/"$1" /usr/lib64/"$1" /usr/lib/"$1" >/dev/null 2>&1; }
have_lib libjemalloc.so.2 || missing="$missing libjemalloc2"
have_lib libtcmalloc_minimal.so.4 || missing="$missing libtcmalloc-minimal4"
have_lib libmimalloc.so.2 || missing="$missing libmimalloc2.0"
command -v sqlite3 >/dev/null 2>&1 || missing="$missing sqlite3"
command -v g++ >/dev/null 2>&1 || missing="$missing g++"
command -v git >/dev/null 2>&1 || missing="$missing git"
command -v clang-format >/dev/null 2>&1 || missing="$missing clang-format"
command -v cc >/dev/null 2>&1 || missing="$missing build-essential"
command -v clang >/dev/null 2>&1 || missing="$missing clang" # libFuzzer
[ -z "$missing" ] && exit 0
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
echo "installing:$missing"
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
