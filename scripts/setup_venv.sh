#!/usr/bin/env bash
# Creates .venv once. Where the system python already imports torch (e.g. a GPU node whose
# image ships a CUDA torch and has no network), the venv sees that torch and its packages;
# otherwise it installs the CPU torch 2.13.0 wheel from this machine's disk. Never downloads a
# CUDA torch: the extension is built with --no-build-isolation against whatever torch is here.
set -euo pipefail
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import torch, pytest, hypothesis, numpy" 2>/dev/null; then
  exit 0
fi
if "$PYTHON" -c "import torch" 2>/dev/null; then
  "$PYTHON" -m venv --system-site-packages "$VENV"
  # If the system python is itself a venv, --system-site-packages would skip its packages:
  # link them in explicitly.
  parent_sites=$("$PYTHON" -c "import site, sys; print('\n'.join(p for p in site.getsitepackages() if sys.prefix != sys.base_prefix))")
  if [ -n "$parent_sites" ]; then
    site_dir=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    printf '%s\n' "$parent_sites" > "$site_dir/_mxfuse_parent_env.pth"
  fi
else
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"
fi
missing=$("$VENV/bin/python" - <<'PY'
import importlib.util
print(" ".join(m for m in ("pytest", "hypothesis", "numpy", "ninja", "setuptools", "wheel")
               if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
  "$VENV/bin/python" -m pip install -q $missing
fi
"$VENV/bin/python" -c "import torch; print('mxfuse venv: torch', torch.__version__, 'cuda', torch.version.cuda, 'hip', torch.version.hip)"
