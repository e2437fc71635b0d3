#!/bin/sh
# The main job: record two runs of the sample project with `pytest --runstore`, then ask
# runstore what happened. The first run finds the exchange-rate cache cold, so
# test_exchange_rates_are_fresh fails; the second finds it warm and the test passes. Both runs
# ran the same code (one code fingerprint of the files the test ran): that is evidence of
# flakiness (the outcome changed while the code did not), so `runstore flaky` lists it
# because of `same_code`, in a git checkout with uncommitted changes or outside git too.
# Had the sample project's code changed between the runs, the test would only be `recovered`.
#
# Runs from examples/sample-project, so the runs land in that project's default local
# database, .runstore/runstore.db, where `runstore show` and `runstore flaky` find them.
# Uses the virtual environment of the repository (.venv) unless RUNSTORE_BIN names the
# folder holding `python` and `runstore`.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${RUNSTORE_BIN:-$repo/.venv/bin}
cd "$repo/examples/sample-project"

record() {
    # pytest exits 1 when a test failed: that is a run worth recording, not an error here.
    status=0
    SAMPLE_RATES_CACHE=$1 "$bin/python" -m pytest --runstore -q -p no:cacheprovider || status=$?
    if [ "$status" -gt 1 ]; then
        echo "main-job: pytest failed to run (exit $status)" >&2
        exit "$status"
    fi
}

echo "== run 1: pytest --runstore (rate cache cold)"
record cold
echo
echo "== run 2: pytest --runstore (rate cache warm)"
record warm
echo
echo "== runstore show"
"$bin/runstore" show
echo
echo "== runstore flaky"
"$bin/runstore" flaky
