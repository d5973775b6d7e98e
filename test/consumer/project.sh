#!/usr/bin/env bash
# Writes the consumer project of the README into DEST: its CMakeLists.txt is the README's
# ```cmake blocks, line for line (the lines of a part the package lacks, onnx or dist, left
# out), and its sources are app.cpp, export.cpp and ddp.cpp of this folder. Fails when
# docs/ or the README name a CMake target (reel::x in a cmake block, or "target `reel::x`")
# that the README's blocks do not build.
# Usage: project.sh DEST "PARTS" (PARTS: the parts the package has, e.g. "onnx dist")
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
dest=$1 parts=$2
cmake_blocks() { awk '/^```cmake$/ {on = 1; next} /^```/ {on = 0} on' "$@"; }
mkdir -p "$dest"
cmake_blocks "$root/README.md" > "$dest/CMakeLists.txt.readme"
grep -q '^find_package(reel REQUIRED)' "$dest/CMakeLists.txt.readme" ||
  { echo "README.md has no cmake block with find_package(reel REQUIRED)"; exit 1; }
drop='^$'
[[ " $parts " == *" onnx "* ]] || drop+='|\(export|reel::onnx'
[[ " $parts " == *" dist "* ]] || drop+='|\(ddp|reel::dist'
grep -Ev "$drop" "$dest/CMakeLists.txt.readme" > "$dest/CMakeLists.txt"
cp "$here/app.cpp" "$here/export.cpp" "$here/ddp.cpp" "$dest/"
built=$(grep -o 'reel::[a-z_]*' "$dest/CMakeLists.txt.readme" | sort -u)
named=$( { cmake_blocks "$root/README.md" "$root"/docs/*.md | grep -o 'reel::[a-z_]*';
           grep -ho 'target `reel::[a-z_]*`' "$root/README.md" "$root"/docs/*.md | grep -o 'reel::[a-z_]*'; } | sort -u)
missing=$(comm -13 <(echo "$built") <(echo "$named"))
[ -z "$missing" ] || { echo "docs name CMake targets the README's project does not build: $missing"; exit 1; }
echo "consumer project: the README's cmake lines ($(wc -l < "$dest/CMakeLists.txt") of them), targets:" $built
