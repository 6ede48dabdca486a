#!/usr/bin/env bash
# Run one tier of the tests: pytest with its 20 slowest printed, its wall time and a JUnit XML of every test's
# time kept under $HVDBENCH_TEST_TIMES (default results/test-times) for tools/times.py. Fails when pytest
# collected no test (pytest's exit code 5 must not pass silently).
set -uo pipefail
usage="usage: run-tests.sh PYTHON TIER [pytest args]"
PY=${1:?$usage}
TIER=${2:?$usage}
shift 2
export PATH="$(dirname "$PY"):$PATH"
times=${HVDBENCH_TEST_TIMES:-results/test-times}
mkdir -p "$times"
start=$(date +%s)
"$PY" -m pytest --junitxml="$times/$TIER.xml" "$@"
rc=$?
echo "$(( $(date +%s) - start )) $rc" > "$times/$TIER.wall"
if [[ $rc == 5 ]]; then
  echo "run-tests: pytest collected no tests for $TIER; failing" >&2
  exit 1
fi
exit $rc
