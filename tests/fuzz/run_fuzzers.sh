#!/bin/sh
# Runs each libFuzzer target given for SECONDS over its committed seeds
# (tests/fuzz/corpus/<name>) and what earlier runs here found (build/fuzz/corpus/<name>,
# where new inputs go). Fails at the first crash, sanitizer report, broken contract
# (FUZZ_CHECK), leak, or input that takes over 10 s (a hang); the input is saved as
# build/fuzz/<name>-crash-* (or -timeout-*, -leak-*) to replay: build/fuzz/fuzz_<name> FILE.
set -eu
seconds=$1
shift
for target in "$@"; do
	name=${target##*/fuzz_}
	found=build/fuzz/corpus/$name
	seeds=tests/fuzz/corpus/$name
	log=build/fuzz/$name.log
	mkdir -p "$found"
	[ -d "$seeds" ] || seeds=
	# FUZZ_SEED: libFuzzer's -seed; 0 (the default) draws one, make test-fuzz fixes it.
	if NAIAD_FUZZ_SEEDS=$found "$target" -seed="${FUZZ_SEED:-0}" -max_total_time="$seconds" -timeout=10 \
		-rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
		-artifact_prefix="build/fuzz/$name-" "$found" $seeds > "$log" 2>&1; then
		runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
		cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
		echo "fuzz $name: $runs inputs in ${seconds}s, $cov, no failure"
	else
		tail -n 60 "$log"
		echo "fuzz $name: FAILED (log: $log)"
		exit 1
	fi
done
