#!/usr/bin/env bash
# Installs the Debian packages named as arguments that are missing (as root, or through sudo);
# silent when all are there. Shared by tools/setup.sh and the bench set-up scripts.
# Usage: tools/apt-install.sh TAG PKG...   (TAG prefixes the one line it prints)
set -euo pipefail
tag="$1"; shift
missing=""
for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "$tag: installing$missing" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
