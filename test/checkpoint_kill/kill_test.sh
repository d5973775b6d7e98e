#!/usr/bin/env bash
# usage: kill_test.sh SAVER WORKDIR — SAVER is checkpoint_saver (saver.cpp).
# Kills a saving process 32 times at random moments, then checks that the checkpoint is
# whole, that the link to it is still a link, and that no temporary file is left.
set -u
saver="$1"; work="$2"
rm -rf "$work"; mkdir -p "$work"
target="$work/real.safetensors"; link="$work/latest.safetensors"
ln -s real.safetensors "$link"
"$saver" once "$link" || { echo "the first save failed"; exit 1; }
temps() { find "$work" -name '*.tmp-*' | wc -l; }
RANDOM=13  # the same kill moments every run
mid_write=0
for i in $(seq 1 32); do
  "$saver" loop "$link" > "$work/out" & pid=$!
  # it checks what the previous one left, then saves; once its first save is done, kill
  # it 0-99 ms later: at any point of a save
  # (a save fsyncs: on a busy disk the first one may take seconds, so wait up to ~2 minutes)
  for _ in $(seq 1 12000); do grep -q saving "$work/out" && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.01; done
  if ! grep -q saving "$work/out"; then
    kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
    echo "before kill $i: the saver never finished its first save: $(cat "$work/out")"; exit 1
  fi
  # never wait for a looping saver: it only ends when killed
  grep -q "a whole checkpoint" "$work/out" || { kill -KILL "$pid"; wait "$pid" 2>/dev/null;
    echo "before kill $i: the checkpoint is not whole"; exit 1; }
  sleep "0.0$(printf '%02d' $((RANDOM % 100)))"
  kill -KILL "$pid"; wait "$pid" 2>/dev/null
  n=$(temps)
  [ "$n" -gt 0 ] && mid_write=$((mid_write + 1))
  # each save removes what killed saves left: at most the last one's temporary is there
  [ "$n" -le 1 ] || { echo "kill $i: $n temporary files pile up:"; ls -la "$work"; exit 1; }
done
"$saver" check "$link" > /dev/null || { echo "after the last kill: the checkpoint is not whole"; exit 1; }
"$saver" once "$link" || { echo "the last save failed"; exit 1; }
[ "$(temps)" -eq 0 ] || { echo "temporary files left after a clean save:"; ls -la "$work"; exit 1; }
[ -L "$link" ] || { echo "$link is no longer a symbolic link"; exit 1; }
"$saver" check "$target" || exit 1
echo "32 kills, $mid_write of them mid-write: only whole checkpoints, no temporary files left"
rm -rf "$work"
