#!/usr/bin/env bash
# Installs what bench/export-torchvision.py needs, Debian's python3-torchvision (which brings
# python3-torch and python3-numpy), when it is missing; as root, or through sudo. Safe to run
# again. Usage: bench/tv-setup.sh
set -euo pipefail
bash "$(dirname "$0")/../tools/apt-install.sh" tv-setup python3-torchvision python3-torch python3-numpy
/usr/bin/python3 -c "import torch, torchvision; print('tv-setup: torch %s, torchvision %s' % (torch.__version__, torchvision.__version__))" >&2
