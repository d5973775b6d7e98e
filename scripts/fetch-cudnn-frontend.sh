#!/usr/bin/env bash
# Fetches the headers of NVIDIA's cuDNN frontend (the C++ graph API over cuDNN's backend
# API: scaled dot-product attention as one fused graph) into .deps/cudnn-frontend/include,
# from PyPI's nvidia-cudnn-frontend wheel (headers only; Debian has no package). Python's
# standard library does the work: no pip, no venv. The wheel's sha256 is checked against
# PyPI's simple index. Once fetched, later calls do nothing.
#   scripts/fetch-cudnn-frontend.sh
# cuda/CMakeLists.txt compiles cuda/attention_cudnn.cpp when the headers are there
# (REEL_CUDNN_FRONTEND_DIR names another folder); without them REEL_CUDA_HALF_ATTENTION=cudnn
# is an Error saying to run this script.
set -euo pipefail
cd "$(dirname "$0")/.."
version=1.32.0
dest=.deps/cudnn-frontend
if [[ -f "$dest/include/cudnn_frontend.h" && "$(cat "$dest/VERSION" 2>/dev/null)" == "$version" ]]; then exit 0; fi
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
python3 - "$version" "$dest.partial" <<'PY'
import hashlib, io, re, sys, urllib.request, zipfile
version, out = sys.argv[1], sys.argv[2]
# PyPI's simple index (PEP 503): links with the file's sha256 after '#'
url = "https://pypi.org/simple/nvidia-cudnn-frontend/"
with urllib.request.urlopen(url, timeout=60) as r:
    page = r.read().decode()
# the headers are the same in every wheel of a version: take an x86_64 Linux one
pattern = r'href="([^"#]*/(nvidia_cudnn_frontend-' + re.escape(version) + r'-[^"#/]*manylinux[^"#/]*x86_64[^"#/]*\.whl))#sha256=([0-9a-f]{64})"'
wheels = [{"url": m[0], "filename": m[1], "sha256": m[2]} for m in re.findall(pattern, page)]
if not wheels:
    sys.exit(f"fetch-cudnn-frontend: no Linux x86_64 wheel of nvidia-cudnn-frontend {version} at {url}")
w = wheels[0]
with urllib.request.urlopen(w["url"], timeout=300) as r:
    data = r.read()
if hashlib.sha256(data).hexdigest() != w["sha256"]:
    sys.exit(f"fetch-cudnn-frontend: {w['filename']}: sha256 does not match PyPI's")
n = 0
with zipfile.ZipFile(io.BytesIO(data)) as z:
    for name in z.namelist():
        if name.startswith("include/") and not name.endswith("/"):
            z.extract(name, out)
            n += 1
if n == 0:
    sys.exit(f"fetch-cudnn-frontend: {w['filename']} holds no include/ folder")
print(f"fetch-cudnn-frontend: {n} headers of {w['filename']}")
PY
echo "$version" > "$dest.partial/VERSION"
rm -rf "$dest"
mv "$dest.partial" "$dest"
