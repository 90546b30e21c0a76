#!/usr/bin/env bash
# On the device machine: a queue of long GPU stages that run one after another in their own
# process session (setsid), so that they outlive the device call that queued them. Later calls
# carry the next release's wheels, install them and queue more while the GPU works; the machine
# stays warm as long as calls follow each other within its idle window.
#   bash tests/gpu/queue.sh add NAME SITE STAGE [ARGS …]   # queue `session.sh STAGE ARGS` on vLLM in SITE
#   bash tests/gpu/queue.sh collect                        # $OUT/queue.tar.gz: every job's results so far
#   bash tests/gpu/queue.sh wait SECONDS                   # collect once the queue is empty, or at SECONDS
# Each job runs in its own snapshot of the working tree (a device call re-syncs the tree in place)
# and writes under /tmp/kvaudit-queue/out/NAME/results.
set -uo pipefail
q=/tmp/kvaudit-queue
verb=${1:?add|collect|wait}; shift
mkdir -p "$q/pending" "$q/running" "$q/done" "$q/out"

status() {
  for state in done running pending; do
    for job in $(ls "$q/$state"); do echo "$state $job"; done
  done
  tail -n 4 "$q"/out/*/results/*.txt 2>/dev/null | grep -v '^$' | tail -n 40
  return 0
}

collect() {
  status
  tar -czf "$OUT/queue.tar.gz" --exclude="*.tar.gz" -C "$q" out runner.log 2>/dev/null
  ls -la "$OUT"
}

case $verb in
  add)
    name=${1:?name} site=${2:?site}; shift 2
    n=$(find "$q/pending" "$q/running" "$q/done" -type f | grep -c .)
    printf '%s\n' "$site" "$@" > "$q/pending/$(printf %03d "$n")-$name"
    cp "$0" "$q/queue.sh"   # the runner reads its own copy: the tree may be re-synced under it
    # the wheels and a local virtual environment stay out of the snapshot: each is gigabytes
    tar --exclude=./.gpuwheels --exclude=./.venv -cf - . | (mkdir -p "$q/tree" && tar -xf - -C "$q/tree")
    setsid -f bash "$q/queue.sh" run < /dev/null >> "$q/runner.log" 2>&1
    status ;;
  run)
    exec 9> "$q/runner.lock"
    flock -n 9 || exit 0   # one runner at a time
    while job=$(ls "$q/pending" | head -n 1) && [ -n "$job" ]; do
      mv "$q/pending/$job" "$q/running/$job"
      mapfile -t spec < "$q/running/$job"
      name=${job#*-}
      echo "$(date +%T) start $job: ${spec[*]}"
      rm -rf "$q/run-$name" && cp -a "$q/tree" "$q/run-$name"
      mkdir -p "$q/out/$name"
      (cd "$q/run-$name" && OUT=$q/out/$name KVAUDIT_SITE=${spec[0]} bash tests/gpu/session.sh "${spec[@]:1}")
      echo "$(date +%T) end $job: exit $?"
      rm -rf "$q/run-$name"   # its results are under out/NAME; the snapshot is not needed again
      mv "$q/running/$job" "$q/done/$job"
    done ;;
  collect)
    collect ;;
  wait)
    deadline=$((SECONDS + ${1:?seconds}))
    while [ $SECONDS -lt $deadline ] && [ -n "$(find "$q/pending" "$q/running" -type f)" ]; do sleep 5; done
    collect ;;
esac
