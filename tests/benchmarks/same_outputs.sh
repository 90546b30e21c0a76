#!/usr/bin/env bash
# Does this checkout print what REV printed? Every fixture log through `kvaudit ingest` in all four
# formats, three committed reports through `show` (four formats) and `plan`, and one `diff`, run
# by REV (a temporary git worktree) and by this checkout; prints the outputs that differ.
#   bash tests/benchmarks/same_outputs.sh 6d66d4f
set -euo pipefail
rev=${1:?a git revision to compare with}
here=$(cd "$(dirname "$0")/../.." && pwd)
py=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'git -C "$here" worktree remove --force "$tmp/old" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$here" worktree add -q --detach "$tmp/old" "$rev"
outputs() {  # ROOT OUT
  local root=$1 out=$2 f n fmt r
  mkdir -p "$out"
  cd "$root"  # python -m puts the working folder first on sys.path, before PYTHONPATH
  while IFS= read -r f; do
    n=${f#"$here/tests/fixtures/logs/"}; n=${n//\//__}
    for fmt in json table markdown csv; do
      { PYTHONPATH=$root "$py" -m kvaudit ingest "$f" -f $fmt --width 120 2>&1 || echo "rc $?"; } > "$out/$n.$fmt"
    done
  done < <(find "$here/tests/fixtures/logs" -type f | sort)
  for r in h200-real-llama-3.1-8b.json cpu-sweep-base.json h200-selftest.json; do
    for fmt in json table markdown csv; do
      { PYTHONPATH=$root "$py" -m kvaudit show "$here/tests/benchmarks/results/$r" -f $fmt --width 120 2>&1 \
        || echo "rc $?"; } > "$out/show-$r.$fmt"
    done
    { PYTHONPATH=$root "$py" -m kvaudit plan "$here/tests/benchmarks/results/$r" --gmu 0.5 --max-model-len 8192 \
      -f json 2>&1 || echo "rc $?"; } > "$out/plan-$r.json"
  done
  { PYTHONPATH=$root "$py" -m kvaudit diff "$here/tests/benchmarks/results/h200-real-llama-3.1-8b.json" \
    "$here/tests/benchmarks/results/h200-real-deepseek-v2-lite.json" -f json 2>&1 || echo "rc $?"; } > "$out/diff.json"
}
outputs "$tmp/old" "$tmp/a"
outputs "$here" "$tmp/b"
total=$(ls "$tmp/b" | wc -l)
differ=$( (diff -rq "$tmp/a" "$tmp/b" || true) | wc -l)
diff -r "$tmp/a" "$tmp/b" | grep '^[<>]' | sort | uniq -c | sort -rn | head -20 || true
echo "$differ of $total outputs differ from $rev"
