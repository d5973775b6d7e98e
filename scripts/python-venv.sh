#!/usr/bin/env bash
# Creates (once) the Python virtual environment of the interoperability tests and prints
# its python. Usage: scripts/python-venv.sh VENV_DIR
# The venv is rebuilt only when test/python/requirements.txt changes (its copy is kept
# inside the venv), so a build folder pays for `pip install` once. Needs python3-venv
# (scripts/install-deps.sh) and PyPI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:?usage: python-venv.sh VENV_DIR}
req=$root/test/python/requirements.txt
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.installed"; then
  echo "$venv/bin/python"
  exit 0
fi
# One creator at a time: ctest -j may start two tests needing the venv.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [ -x "$venv/bin/python" ] && cmp -s "$req" "$venv/requirements.installed"; then
  echo "$venv/bin/python"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv" >&2 || { echo "python-venv.sh: python3 -m venv failed: install python3-venv (scripts/install-deps.sh)" >&2; exit 1; }
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req" >&2
cp "$req" "$venv/requirements.installed"
echo "$venv/bin/python"
