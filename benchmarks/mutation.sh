#!/usr/bin/env bash
# Benchmark: mutation testing of the verdict code with mutmut 3.8.1 (figures, never CI).
#   bash benchmarks/mutation.sh [gate|performance|upgrade|expectations|culprit ...]
# Each module set runs in its own clone of COMMIT (default HEAD) under reports/out/mutation/<name>,
# one worker, nice 19, against the fast meta tests of that module; results and every surviving
# mutant's diff land beside it (<name>.results.txt, <name>.survivors.diff). Scores and the
# judgement of each survivor of the last run: benchmarks/mutation.md.
# The tool lives in its own venv (benchmarks/.mutmut-venv: a hard-link copy of .venv plus
# mutmut, installed with that copy's own python so nothing lands in .venv), patched by
# benchmarks/mutmut-3.8.1-decorators.patch so that it also mutates @property and
# @pytest.hookimpl functions (stock 3.8.1 skips every decorated function).
set -euo pipefail
set -f  # mutant name patterns hold "*": never glob them
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${MUTMUT_VENV:-$ROOT/benchmarks/.mutmut-venv}
RUNS=$ROOT/reports/out/mutation
SRC=$ROOT
COMMIT=${COMMIT:-$(git -C "$ROOT" rev-parse HEAD)}
mkdir -p "$RUNS"
if [ ! -x "$VENV/bin/mutmut" ]; then
    cp -al "$ROOT/.venv" "$VENV"
    "$VENV/bin/python" -m pip install -q mutmut==3.8.1
    (cd "$VENV/lib/python3.11/site-packages/mutmut/mutation" && patch -p0 file_mutation.py < "$ROOT/benchmarks/mutmut-3.8.1-decorators.patch")
fi

setup_run() {  # name, only_mutate (newline separated), tests (newline separated), deselects (newline separated)
    local name=$1 only=$2 tests=$3 deselect=$4
    rm -rf "$RUNS/$name"
    git clone -q "$SRC" "$RUNS/$name"
    git -C "$RUNS/$name" checkout -q "$COMMIT"
    {
        echo "[mutmut]"
        echo "source_paths="
        printf '    %s\n' fixtures reports upgrades
        echo "only_mutate="
        printf '%s\n' "$only" | sed 's/^/    /'
        echo "also_copy="
        printf '    %s\n' conftest.py meta_tests conformance docs neuron_standins benchmarks scripts requirements README.md .gitignore
        echo "pytest_add_cli_args="
        printf '    %s\n' -m meta
        if [ -n "$deselect" ]; then
            printf '%s\n' "$deselect" | while IFS= read -r d; do printf '    --deselect\n    %s\n' "$d"; done
        fi
        echo "pytest_add_cli_args_test_selection="
        printf '%s\n' "$tests" | sed 's/^/    /'
        echo "timeout_multiplier=5.0"
        echo "timeout_constant=10.0"
    } > "$RUNS/$name/setup.cfg"
}

run_one() {  # name, mutant name patterns (space separated; empty: every mutant of the module)
    local name=$1 patterns=$2
    cd "$RUNS/$name"
    echo "=== $name: $(date -Is)"
    # shellcheck disable=SC2086
    nice -n 19 "$VENV/bin/mutmut" run --max-children 1 $patterns > "$RUNS/$name.run.log" 2>&1 || echo "mutmut exit $?"
    nice -n 19 "$VENV/bin/mutmut" results --all true > "$RUNS/$name.results.all.txt" 2>&1 || true
    if [ -n "$patterns" ]; then  # keep the mutants of the restricted functions only
        local re; re=$(printf '%s\n' $patterns | sed 's/[.]/[.]/g; s/[*]/[0-9]+/; s/^/^    /; s/$/:/' | paste -sd'|')
        grep -E "$re" "$RUNS/$name.results.all.txt" > "$RUNS/$name.results.txt" || true
    else
        cp "$RUNS/$name.results.all.txt" "$RUNS/$name.results.txt"
    fi
    grep -v ': killed$' "$RUNS/$name.results.txt" | while read -r m _; do
        m=${m%:}; [ -n "$m" ] || continue
        "$VENV/bin/mutmut" show "$m"; echo
    done > "$RUNS/$name.survivors.diff" 2>&1 || true
    echo "=== $name done: $(date -Is)"
}

declare -A ONLY TESTS DESEL PATTERNS
# Functions mutated where a module is restricted to the functions that compute verdicts
# (the whole module has too many mutants for the time box at about 5 s a mutant here).
PATTERNS[gate]=""   # the whole module
PATTERNS[performance]="upgrades.perf_compare.x_judge__mutmut_* upgrades.perf_compare.x_measurement_problems__mutmut_*
upgrades.perf_compare.xǁVerdictǁpassed__mutmut_* fixtures.oracles.performance.x_warmup_length__mutmut_*
fixtures.oracles.performance.x_compare_step_times__mutmut_* fixtures.oracles.performance.x_compare_peaks__mutmut_*
fixtures.oracles.performance.x_unmeasured__mutmut_* fixtures.oracles.performance.x__measured__mutmut_*
fixtures.oracles.performance.xǁComparisonǁinconclusive__mutmut_* fixtures.oracles.performance.x_t975__mutmut_*
fixtures.oracles.performance.x_compare_step_times_one_launch__mutmut_* upgrades.perf_compare.x_busy__mutmut_*
upgrades.perf_launch.xǁLaunchǁslowest_rank__mutmut_* upgrades.perf_compare.x_inconclusive_reason__mutmut_*
upgrades.perf_compare.x_work_changed__mutmut_* upgrades.perf_compare.xǁVerdictǁmore_launches_could_decide__mutmut_*
upgrades.perf_compare.xǁVerdictǁlabel__mutmut_* upgrades.perf_history.x_largest_split_change__mutmut_*
upgrades.perf_history.x_aa_policy__mutmut_* upgrades.perf_history.x_against_history__mutmut_*"
PATTERNS[upgrade]="upgrades.compare.x_categorize__mutmut_* upgrades.compare.x_compare__mutmut_*
upgrades.compare.x__problems__mutmut_* upgrades.compare.x_contract_verdict__mutmut_*
upgrades.verdict.xǁContractVerdictǁbody__mutmut_* upgrades.verdict.xǁContractVerdictǁtext__mutmut_*
upgrades.verdict.xǁUpgradeVerdictǁoutcome__mutmut_* upgrades.verdict.xǁUpgradeVerdictǁtext__mutmut_*
upgrades.result.xǁUpgradeResultǁverdict__mutmut_* upgrades.result.xǁUpgradeResultǁto_json__mutmut_*
upgrades.result.x_verdict_of__mutmut_* upgrades.verdict.x_label__mutmut_* upgrades.causes.x_explain__mutmut_*
upgrades.comparison.xǁContractChangeǁholds_a_deviation__mutmut_* upgrades.comparison.xǁComparisonǁsuspects__mutmut_*"
PATTERNS[expectations]="fixtures.session.expectations.x_parse__mutmut_* fixtures.session.expectations.xǁExpectationǁholds_for__mutmut_*
fixtures.session.expectations.xǁExpectationǁmeasured__mutmut_* fixtures.session.expectations.x_pytest_runtest_makereport__mutmut_*"
PATTERNS[culprit]=""  # the whole module
ONLY[gate]="reports/gate.py"
TESTS[gate]="meta_tests/test_gate.py"
DESEL[gate]=""
ONLY[performance]="upgrades/perf_compare.py
upgrades/perf_launch.py
upgrades/perf_history.py
fixtures/oracles/performance.py"
TESTS[performance]="meta_tests/test_performance.py
meta_tests/test_perf_history.py
meta_tests/test_device_memory.py"
# the two tests that run the stand-ins need the rehearsal venv, which the mutation clone lacks
DESEL[performance]="meta_tests/test_device_memory.py::test_the_standin_driver_writes_the_documented_counters_and_the_probe_reads_them
meta_tests/test_device_memory.py::test_an_eager_kernel_launch_on_the_device_compiles_once_then_hits_the_cache"
ONLY[upgrade]="upgrades/compare.py
upgrades/causes.py
upgrades/comparison.py
upgrades/verdict.py
upgrades/result.py"
TESTS[upgrade]="meta_tests/test_upgrade.py
meta_tests/test_perf_history.py
meta_tests/test_session_report.py
-k
not end_to_end and not real_candidate"
DESEL[upgrade]=""
ONLY[expectations]="fixtures/session/expectations.py"
TESTS[expectations]="meta_tests/test_expectations.py"
DESEL[expectations]=""
ONLY[culprit]="fixtures/launch/culprit.py"
TESTS[culprit]="meta_tests/test_culprit.py"
DESEL[culprit]=""

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(gate performance upgrade expectations culprit)
for n in "${names[@]}"; do
    setup_run "$n" "${ONLY[$n]}" "${TESTS[$n]}" "${DESEL[$n]}"
    run_one "$n" "${PATTERNS[$n]}"
done
