#!/bin/bash
# The demo preset's night, side by side: the old schedule of looks (1, 2, 4 seeds) and the new one (2, 4
# with two slots), the same code otherwise, interleaved old/new twice (issue 41; bench/RESULTS.md).
#   bench/demo_schedules.sh   (OUT=/some/dir to keep the workspaces elsewhere than /tmp)
ROOT=$(cd "$(dirname "$0")/.." && pwd); L=$ROOT/.venv/bin/looper; PY=$ROOT/.venv/bin/python
for round in 1 2; do
for arm in old new; do
  ws=${OUT:-/tmp}/ab-$arm-$round; rm -rf $ws; $L init $ws --preset demo >/dev/null
  cd $ws
  start=$(date +%s)
  if [ $arm = old ]; then
    $PY -c "import sys; import looper.core.keep.race as i; o = i.schedule; i.schedule = lambda cap, slots=1: o(cap, 1); from looper.cli import main; sys.argv = ['looper', 'run', '--max-experiments', '1']; main()" > run.log 2>&1
  else
    $L run --max-experiments 1 > run.log 2>&1
  fi
  echo "$arm round $round: exit $? in $(( $(date +%s) - start )) s"
  $L report 2>&1 | grep -A3 "decisions:" | head -4
  grep "\->" run.log | tail -3
done
done
