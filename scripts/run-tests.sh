#!/usr/bin/env bash
# Run pytest and fail when it collected no test (pytest's exit code 5 must not pass silently).
set -uo pipefail
PY=${1:?usage: run-tests.sh PYTHON [pytest args]}
shift
export PATH="$(dirname "$PY"):$PATH"
"$PY" -m pytest "$@"
rc=$?
if [[ $rc == 5 ]]; then
  echo "run-tests: pytest collected no tests; failing" >&2
  exit 1
fi
exit $rc
