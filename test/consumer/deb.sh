#!/usr/bin/env bash
# ctest package_deb: `cpack -G DEB` packs the build into its packages (reel, reel-dev,
# reel-onnx, reel-dist; from a CUDA build also reel-cuda, and reel-dist-cuda with NCCL). For every package, each NEEDED entry
# of each of its ELF files (objdump -p) must be a file of the package itself or of a
# package in its Depends, and each Depends entry must be needed by some file. Then the CPU
# packages, unpacked into a scratch root (dpkg -x: no root needed), serve the README's
# consumer project twice, through find_package and through pkg-config, and the programs
# run with only the scratch root on LD_LIBRARY_PATH and, where a mount namespace can be
# made (root, or unprivileged user namespaces), with /usr/local/cuda hidden under an empty
# tmpfs; the loader's trace (LD_DEBUG=libs) must show no library loaded from /usr/local/cuda.
# Usage: deb.sh BUILD_DIR WORK_DIR GENERATOR "PARTS" (PARTS: "onnx dist", those built)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(realpath "$1") work=$2 generator=$3 parts=$4
rm -rf "$work"
mkdir -p "$work"
(cd "$work" && cpack --config "$build/CPackConfig.cmake" -G DEB -B "$work/pkg" > cpack.log 2>&1) ||
  { cat "$work/cpack.log"; exit 1; }

fail() { echo "package_deb: $*"; exit 1; }
declare -A deb_of   # package name -> .deb
declare -A pkg_of_so  # soname shipped by these packages -> the packages (reel and reel-cuda both ship libreel)
for deb in "$work"/pkg/*.deb; do
  name=$(dpkg-deb --field "$deb" Package)
  deb_of[$name]=$deb
  mkdir -p "$work/x/$name" && dpkg -x "$deb" "$work/x/$name"
  while read -r so; do pkg_of_so[$so]+=" $name"; done < <(find "$work/x/$name" -name '*.so*' -printf '%f\n')
  echo "$name: $(basename "$deb") ($(du -h "$deb" | cut -f1)), Depends: $(dpkg-deb --field "$deb" Depends)"
done
for p in reel reel-dev; do [ -n "${deb_of[$p]:-}" ] || fail "no package $p"; done
for p in $parts; do [ -n "${deb_of[reel-$p]:-}" ] || fail "no package reel-$p"; done

# The package that provides a library this machine has: dpkg's owner of the file, or for the
# CUDA toolkit's unpackaged libraries the name NVIDIA's apt repository gives the package.
ldconfig -p > "$work/ldconfig.txt"
owner_of() {
  local so=$1 path owner
  path=$(awk -v so="$so" '$1 == so {print $NF}' "$work/ldconfig.txt" | head -1)
  for f in "$path" "${path/#\/lib\//\/usr\/lib\/}" "${path/#\/usr\/lib\//\/lib\/}"; do
    [ -n "$f" ] || continue
    owner=$(dpkg -S "$f" 2> /dev/null || true)
    [ -n "$owner" ] && { echo "${owner%%:*}"; return; }
  done
  case $so in
    libcudart.so.*) echo "cuda-cudart-${so#libcudart.so.}-*" ;;
    libcublas.so.* | libcublasLt.so.*) echo "libcublas-${so##*.so.}-*" ;;
    libcudnn*.so.*) echo "libcudnn${so##*.so.}-cuda-*" ;;
    libnccl.so.*) echo "libnccl${so##*.so.}" ;;
    *) echo "?" ;;
  esac
}
for name in "${!deb_of[@]}"; do
  deps=$(dpkg-deb --field "${deb_of[$name]}" Depends | tr ',' '\n' | sed 's/(.*)//; s/ //g' | grep -v '^$' || true)
  used=""
  while read -r f; do
    for so in $(objdump -p "$f" | awk '$1 == "NEEDED" {print $2}'); do
      [ -e "$(dirname "$f")/$so" ] && continue  # in this package
      want=${pkg_of_so[$so]:-$(owner_of "$so")}
      [ "$want" = "?" ] && fail "$name: ${f#"$work"/x/} needs $so, which no package on this machine provides"
      # shellcheck disable=SC2053
      hit=$(for d in $deps; do for w in $want; do if [[ $d == $w ]]; then echo "$d"; fi; done; done | head -1)
      [ -n "$hit" ] || fail "$name: ${f#"$work"/x/} needs $so (package $want), which Depends does not name: $deps"
      used+=" $hit"
    done
  done < <(find "$work/x/$name" -type f -name '*.so*')
  for d in $deps; do
    [[ " $used " == *" $d "* ]] || [ "$name" = reel-dev ] ||
      fail "$name: Depends names $d, which none of its files loads"
  done
  echo "$name: every NEEDED entry is in the package or its Depends, and every Depends entry is needed"
done
contents=$(dpkg-deb -c "${deb_of[reel-dev]}")
for f in ./usr/include/reel/reel.h ./usr/lib/cmake/reel/reelConfig.cmake ./usr/lib/pkgconfig/reel.pc; do
  grep -q " $f\$" <<< "$contents" || fail "reel-dev lacks $f"
done
objdump -p "$work/x/reel/usr/lib/libreel.so.0" | grep -E 'NEEDED.*(cuda|cublas|cudnn|nccl|mpi)' &&
  fail "the CPU package's libreel loads CUDA or MPI"
if [[ " $parts " == *" dist "* ]]; then
  objdump -p "$work/x/reel-dist/usr/lib/libreel_dist.so.0" | grep -E 'NEEDED.*(cuda|cublas|cudnn|nccl)' &&
    fail "the package reel-dist's libreel_dist loads CUDA"
fi
for v in reel-cuda reel-dist-cuda; do
  [ -z "${deb_of[$v]:-}" ] && continue
  [ "$(dpkg-deb --field "${deb_of[$v]}" Provides)" = "${v%-cuda} (= $(dpkg-deb --field "${deb_of[reel]}" Version))" ] ||
    fail "$v does not provide ${v%-cuda}"
done

# the CPU packages in one scratch root
for p in reel reel-dev $(for q in $parts; do echo "reel-$q"; done); do dpkg -x "${deb_of[$p]}" "$work/root"; done
prefix=$work/root/usr
"$here/project.sh" "$work/src" "$parts"
cmake -S "$work/src" -B "$work/cmake" -G "$generator" -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/cmake" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
echo "pkg-config: $(pkg-config --cflags --libs reel)"
# shellcheck disable=SC2046
g++ -O1 "$here/app.cpp" $(pkg-config --cflags --libs reel) -o "$work/app_pc"

programs=("$work/cmake/app" "$work/app_pc")
[[ " $parts " == *" onnx "* ]] && programs+=("$work/cmake/export")
[[ " $parts " == *" dist "* ]] && programs+=("$work/cmake/ddp")
run_all() {
  cd "$work"
  local p trace
  for p in "${programs[@]}"; do
    trace=$work/ld.${p##*/}
    LD_DEBUG=libs LD_DEBUG_OUTPUT=$trace LD_LIBRARY_PATH=$prefix/lib "$p" || exit 1
  done
}
hidden=no
if unshare --mount --propagation private true 2> /dev/null; then ns=(unshare --mount --propagation private)
elif unshare -rm true 2> /dev/null; then ns=(unshare -rm)
else ns=(); fi
if [ ${#ns[@]} -gt 0 ] && [ -d /usr/local/cuda ]; then
  export -f run_all
  export work prefix
  export programs_list="${programs[*]}"
  "${ns[@]}" bash -c 'set -e; mount -t tmpfs none /usr/local/cuda; [ -z "$(ls /usr/local/cuda)" ]
    read -ra programs <<< "$programs_list"; run_all' || fail "a consumer failed with /usr/local/cuda hidden"
  hidden=yes
else
  run_all || fail "a consumer failed"
fi
if grep -l 'trying file=/usr/local/cuda\|calling init: /usr/local/cuda' "$work"/ld.* 2> /dev/null; then
  fail "a consumer loaded a library from /usr/local/cuda"
fi
grep -q "calling init: $prefix/lib/libreel.so.0" "$work"/ld.app.* || fail "the consumer did not load the package's libreel"
echo "the consumers ran from the unpacked CPU packages (/usr/local/cuda hidden: $hidden), loading nothing from /usr/local/cuda"
# Passed: the staging tree, the unpacked packages and the scratch root (~700 MB from a CUDA
# build) go; the .debs and the logs stay. A failure above keeps everything to look at.
rm -rf "$work/pkg/_CPack_Packages" "$work/x" "$work/root"
