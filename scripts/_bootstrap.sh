# Sourced by every script: makes .venv with the pinned requirements, then leaves
# "$PY" pointing at its interpreter. Re-installs only when a requirements file changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

pick_python() {
  local candidate
  for candidate in python3.12 python3 python3.11 python; do
    if command -v "$candidate" >/dev/null 2>&1 &&
       "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
      echo "$candidate"
      return 0
    fi
  done
  echo "error: Python 3.11 or newer is required and none was found on PATH" >&2
  return 1
}

if [ ! -x .venv/bin/python ]; then
  base_python="$(pick_python)"
  "$base_python" -m venv .venv || {
    echo "error: could not create .venv with $base_python (on Debian: apt-get install python3-venv)" >&2
    exit 1
  }
fi

stamp=".venv/.requirements.sha256"
wanted="$(cat requirements.txt requirements-aws.txt requirements-serve.txt requirements-dev.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "installing pinned requirements into .venv ..." >&2
  if ! { .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip &&
         .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt; } \
       >.venv/pip.log 2>&1; then
    grep -v 'is ignored: it is neither' .venv/pip.log >&2
    echo "error: installing requirements failed (full log: .venv/pip.log)" >&2
    exit 1
  fi
  echo "$wanted" > "$stamp"
fi

PY="$ROOT/.venv/bin/python"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
