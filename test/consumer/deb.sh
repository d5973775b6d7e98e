#!/usr/bin/env bash
# ctest package_deb: `cpack -G DEB` packs the build; the .deb, unpacked into a scratch root
# (dpkg -x: no root needed), serves the consumer project twice: through find_package
# (CMAKE_PREFIX_PATH) and through pkg-config (reel.pc); both programs must run.
# Usage: deb.sh BUILD_DIR WORK_DIR GENERATOR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$1 work=$2 generator=$3
rm -rf "$work"
mkdir -p "$work"
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/pkg" > cpack.log) ||
  { cat "$work/cpack.log"; exit 1; }
deb=$(ls "$work"/pkg/reel_*.deb)
echo "package: $(basename "$deb") ($(du -h "$deb" | cut -f1))"
dpkg-deb --field "$deb" Package Version Depends
contents=$(dpkg-deb -c "$deb")
for f in ./usr/include/reel/reel.h ./usr/lib/cmake/reel/reelConfig.cmake ./usr/lib/pkgconfig/reel.pc; do
  grep -q " $f\$" <<< "$contents" || { echo "the package lacks $f"; exit 1; }
done
grep -q "libreel.so" <<< "$contents" || { echo "the package lacks libreel.so"; exit 1; }
dpkg -x "$deb" "$work/root"
prefix=$work/root/usr

cmake -S "$here" -B "$work/cmake" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build "$work/cmake" > /dev/null
LD_LIBRARY_PATH=$prefix/lib "$work/cmake/consumer"
if [ -x "$work/cmake/consumer_onnx" ]; then
  (cd "$work" && LD_LIBRARY_PATH=$prefix/lib "$work/cmake/consumer_onnx")
fi

export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
echo "pkg-config: $(pkg-config --cflags --libs reel)"
# shellcheck disable=SC2046
g++ -O1 "$here/main.cpp" $(pkg-config --cflags --libs reel) -Wl,-rpath,"$prefix/lib" -o "$work/consumer_pc"
"$work/consumer_pc"
