#!/usr/bin/env bash
# Run one tier of the tests: pytest with its 20 slowest printed, its wall time and a JUnit XML of every test's
# time kept under $HVDBENCH_TEST_TIMES (default results/test-times) for tools/times.py. Fails when pytest
# collected no test (pytest's exit code 5 must not pass silently).
#
# HVDBENCH_TEST_WORKERS=N (N > 1; the multiproc tier's target sets it): the tier's tests not marked `alone` run
# N test files at a time (pytest-xdist, --dist loadfile: each file's tests on one worker, so a module fixture's
# runs stay shared), then those marked alone run one at a time with no other test beside them (they read figures
# of the whole host: tests/conftest.py). The second pass keeps its times as TIER-alone. Either pass may select
# nothing (a PYTEST_ARGS file without alone tests); both selecting nothing fails.
#
# HVDBENCH_TEST_AWAIT_PID=PID: the alone pass first waits until process PID has ended (`make test` passes its
# system set-up, which builds images beside the first pass: nothing may run beside the alone tests).
set -uo pipefail
usage="usage: run-tests.sh PYTHON TIER [pytest args]"
PY=${1:?$usage}
TIER=${2:?$usage}
shift 2
export PATH="$(dirname "$PY"):$PATH"
times=${HVDBENCH_TEST_TIMES:-results/test-times}
workers=${HVDBENCH_TEST_WORKERS:-1}
mkdir -p "$times"

run_pass() {  # NAME [pytest args]: one pytest run, its times kept as NAME; returns pytest's exit code
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$PY" -m pytest --junitxml="$times/$name.xml" "$@"
  rc=$?
  echo "$(( $(date +%s) - start )) $rc" > "$times/$name.wall"
  return $rc
}

if [[ $workers =~ ^[0-9]+$ ]] && (( workers > 1 )); then
  # A later -m replaces the caller's, which names the tier.
  run_pass "$TIER" -n "$workers" --dist loadfile "$@" -m "$TIER and not alone"
  shared=$?
  if [[ -n ${HVDBENCH_TEST_AWAIT_PID:-} ]] && kill -0 "$HVDBENCH_TEST_AWAIT_PID" 2>/dev/null; then
    echo "run-tests: waiting for process $HVDBENCH_TEST_AWAIT_PID (the system set-up) before the alone tests" >&2
    waited=$(date +%s)
    while kill -0 "$HVDBENCH_TEST_AWAIT_PID" 2>/dev/null; do sleep 2; done
    echo "run-tests: waited $(( $(date +%s) - waited )) s" >&2
  fi
  run_pass "$TIER-alone" "$@" -m "$TIER and alone"
  alone=$?
  if [[ $shared == 5 && $alone == 5 ]]; then
    echo "run-tests: pytest collected no tests for $TIER; failing" >&2
    exit 1
  fi
  for rc in $shared $alone; do
    [[ $rc == 0 || $rc == 5 ]] || exit "$rc"
  done
  exit 0
fi

run_pass "$TIER" "$@"
rc=$?
if [[ $rc == 5 ]]; then
  echo "run-tests: pytest collected no tests for $TIER; failing" >&2
  exit 1
fi
exit $rc
