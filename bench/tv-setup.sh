#!/usr/bin/env bash
# Installs what bench/export-torchvision.py needs, Debian's python3-torchvision (which brings
# python3-torch and python3-numpy), when it is missing; as root, or through sudo. Safe to run
# again. Usage: bench/tv-setup.sh
set -euo pipefail
PKGS="python3-torchvision python3-torch python3-numpy"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "tv-setup: installing$missing" >&2
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing > /dev/null
fi
/usr/bin/python3 -c "import torch, torchvision; print('tv-setup: torch %s, torchvision %s' % (torch.__version__, torchvision.__version__))" >&2
