#!/usr/bin/env bash
# ctest package_consumer: `cmake --install` of the build into a scratch prefix, then the
# README's consumer project (project.sh: the README's cmake lines, nothing added) is
# configured against it, built and run: app (reel::reel), export (reel::onnx), ddp (reel::dist).
# Usage: run.sh BUILD_DIR WORK_DIR GENERATOR "PARTS" (PARTS: "onnx dist", those built)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "$1") work=$2 generator=$3 parts=$4
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" > /dev/null
"$here/project.sh" "$work/src" "$parts"
cmake -S "$work/src" -B "$work/build" -G "$generator" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
cd "$work"
"$work/build/app"
[[ " $parts " == *" onnx "* ]] && "$work/build/export"
[[ " $parts " == *" dist "* ]] && "$work/build/ddp"
echo "the README's consumer project built and ran against the installed package (parts: ${parts:-none})"
