#!/usr/bin/env bash
# ctest gpu_paths: bench/gpu_paths.py, the summary's table of the GPU path switches, on
# hand-written logs in gpu-run.sh's formats (logs/: a switch that wins, one held back by a
# slower row, one whose rows include a rate (images_per_s: more is better), one not faster enough, two of four paths winning against the compare step's
# default (the faster taken), a PyTorch number missing, a cut line in a log and in bench.jsonl;
# rnn_probe.log: W9's GRU layer, refused and cut rows among the timed ones), then on a
# folder the way a failed run leaves it (a log missing, one without bench lines, one stopped
# after its default path, no bench.jsonl, no rnn_probe.log), then on no folder. CPU only: the GPU writes the
# real logs, and this is what reads them on the way out of a rented machine.
# Usage: check.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
script=$here/../../bench/gpu_paths.py
python=${PYTHON:-python3}
fail=0
out=""

run() {  # run LOGS_DIR EXPECTED_STATUS
  out=$("$python" "$script" "$1" 2>&1)
  local rc=$?
  echo "$out"
  [[ $rc -eq $2 ]] || { echo "FAIL: exit $rc, expected $2"; fail=1; }
  if grep -q Traceback <<< "$out"; then echo "FAIL: a traceback"; fail=1; fi
}
# a line of the output, exactly (the verdicts)
line() { grep -qxF -- "$1" <<< "$out" || { echo "FAIL: no line '$1'"; fail=1; }; }
# a row of a table: its cells in order, any run of spaces between them
row() {
  local re="^ *$1"
  shift
  local cell
  for cell in "$@"; do re+=" +$cell"; done
  grep -qE -- "$re *\$" <<< "$out" || { echo "FAIL: no row matching '$re'"; fail=1; }
}

echo "==== the fixture"
run "$here/logs" 0
line "  verdict: REEL_CUDNN_RNN=stack wins (0.80 of the default on W9 epoch_s)"
line "  verdict: REEL_CUDA_BN_RELU: default stays (separate: 0.95 of the default on W10 s_per_1000_images but 1.11 on W11 step_ms)"
line "  verdict: REEL_CUDA_HALF_ATTENTION: default stays (cudnn: 0.99 of the default on W12 step_ms)"
line "  verdict: REEL_CUDA_ATTENTION=vector REEL_CUDA_ATTENTION_ROWS=32 wins (0.90 of the default on W12 sdpa_T4096_ms)"
# W7: the warps path wins although the program's own floor probe read 5% slower in its run
line "  verdict: REEL_CUDA_CHANNEL_SUMS=warps wins (0.46 of the default on W7 bias_grad_ms)"
row "W7 bias_grad_ms" 0.0195 0.009 0.46 - - - -
# W9's PyTorch from bench.jsonl's float32 record (0.85), not its amp-bf16 one (0.5)
# three W9 paths, the small-h one logged first: the default is still the section that sets
# REEL_CUDNN_RNN=layers alone, and the table comes in two parts
row "W9 epoch_s" 2.47 2.2 1.976 0.89 0.80
row "W9 epoch_s" 0.85 "2.91 NO" "2.59 NO" "2.32 NO" "<= 0.8"
# W11 has no PyTorch number; its peak memory has no target
row "W11 step_ms" 38.34 42.6 1.11 - - - "<= 0.8"
row "W11 peak_rss_mb" 1390 1387 1.00 - - - -
# the cut W10 batch_ms line of the fused path: skipped and said, its cells empty
row "W10 batch_ms" - 98.3 - 88.8 - "1.11 NO" "<= 0.8"
line "  skipped a malformed line: 'W10  reel      cuda:0 batch_ms               median     103.'"
line "  bench.jsonl: skipped 1 unreadable line"
# W12 under bf16 autocast against PyTorch from its own log (14), not bench.jsonl's float32 (14.07)
row "W12 step_ms" 9.8 9.7 0.99 14 "0.70 yes" "0.69 yes" "<= 0.8"
row "W12 sdpa_T1024_ms" 0.68 0.3 0.44 0.41 "1.66 NO" "0.73 yes" "<= 1"
row "W12 sdpa_T256_ms" 0.17 0.12 0.71 0.3 0.57 0.40 -
# the rows a block against the compare step's W12 (the geometry's choice), in two tables;
# tiles-64 wins too (0.97), vector-32 by more
row "W12 sdpa_T4096_ms" 3.432 3.408 3.313 3.1 2.9 0.99 0.97 0.90 0.84
row "W12 sdpa_T4096_ms" 2.257 "1.52 NO" "1.51 NO" "1.47 NO" "1.37 NO" "1.28 NO" "<= 1"
# NHWC under bf16 autocast, four sections of two and three switches: the fastest setting
# wins whole; W4's images_per_s is a rate (more is better): it neither holds a path back nor
# gets a time target
line "  verdict: REEL_CUDA_CHANNELS_LAST=on REEL_CUDA_HALF_NORM=cudnn REEL_CUDA_HALF_ELEMENTWISE=native wins (0.67 of the default on W4 step_ms)"
row "W4 step_ms" 12 11 9 8 0.92 0.75 0.67
row "W4 step_ms" 10 "1.20 NO" "1.10 NO" "0.90 NO" "0.80 yes" "<= 0.8"
row "W4 images_per_s" "1.067e\\+04" "1.164e\\+04" "1.422e\\+04" "1.6e\\+04" 1.09 1.33 1.50
row "W10 s_per_1000_images" 0.35 "0.86 NO" "0.80 NO" "0.69 yes" "0.57 yes" "<= 0.8"
# W9's GRU layer: cuDNN as reel and PyTorch call it, the fastest with TF32 off and allowed,
# reel's rows against cuDNN's calls as reel makes them; refused rows counted, the cut one skipped
row "cuDNN as reel calls it" 6000 1.00
row "cuDNN as PyTorch calls it" 1500 0.25
row "cuDNN fastest, TF32 off: batch_unpacked persist_static_small_h math=fma padded_io=on" 1400 0.23
row "cuDNN fastest, TF32 allowed: seq_unpacked persist_static_small_h math=default padded_io=on" 1200 0.20
row "reel batch_first path=layers" 6400 1.07
row "PyTorch nn.GRU batch_first" 1650 0.28
line "  5 cuDNN combinations timed, 3 refused"
line "  reading: reel's 6400 us hold 6000 us of cuDNN calls as reel makes them (the wrapper: 400 us); the fastest TF32-off variant takes 1400 us (batch_unpacked persist_static_small_h math=fma padded_io=on)"

echo "==== a failed run's folder"
broken=$(mktemp -d)
trap 'rm -rf "$broken"' EXIT
cp "$here/logs/w9_cudnn_rnn.log" "$here/logs/sdpa_rows_per_block.log" "$broken/"
printf '%s\n' "REEL_CUDA_BN_RELU=separate" \
  "bench_w10_resnet50: error while loading shared libraries: libcudnn.so.9: cannot open shared object file" \
  > "$broken/w10_w11_bn_relu.log"
{ sed -n '1,5p' "$here/logs/w12_half_attention.log"
  echo "REEL_CUDA_HALF_ATTENTION=cudnn"
  echo "terminate called after throwing an instance of 'reel::Error'"; } > "$broken/w12_half_attention.log"
run "$broken" 0
line "  verdict: REEL_CUDNN_RNN=stack wins (0.80 of the default on W9 epoch_s)"
row "W9 epoch_s" 2.47 2.2 1.976 0.89 0.80
row "W9 epoch_s" - - - - "<= 0.8"
line "  w10_w11_bn_relu.log holds no benchmark lines under a REEL_... header: nothing to compare (its last line: 'bench_w10_resnet50: error while loading shared libraries: libcudnn.so.9: cannot open shared object file')"
line "  REEL_CUDA_HALF_ATTENTION=cudnn: no benchmark lines (the step stopped there? the log's last line: \"terminate called after throwing an instance of 'reel::Error'\")"
line "  verdict: REEL_CUDA_HALF_ATTENTION: no verdict (no other path ran)"
line "  no rnn_probe.log: the step did not run (or its budget was spent before it)"
# no bench.jsonl: the rows a block against the log's first section, no PyTorch
line "  verdict: REEL_CUDA_ATTENTION=vector REEL_CUDA_ATTENTION_ROWS=32 wins (0.91 of the default on W12 sdpa_T4096_ms)"
rm "$broken/sdpa_rows_per_block.log"
run "$broken" 0
line "  no sdpa_rows_per_block.log: the step did not run (or its budget was spent before it)"

echo "==== no folder"
run "$broken/absent" 2

if ((fail)); then echo "gpu_paths: FAILED"; exit 1; fi
echo "gpu_paths: all checks passed"
