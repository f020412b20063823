#!/bin/sh
# The sweep's own cost per trial (issue #27, "nothing else slows down"): N command trials
# whose command does nothing but print one figure, so the wall time is tune's (spawning
# the supervisor and `sh`, reading the output, journaling, the report), timed with two
# tune binaries alternated on the same machine, with 1 and 3 repeats per trial.
#
# usage: scripts/sweep-overhead.sh OLD_TUNE NEW_TUNE [N=200] [ROUNDS=3]
set -eu
old=$1 new=$2 n=${3:-200} rounds=${4:-3}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
values=$(seq -s, 1 "$n")
for reps in 1 3; do
    cat >"$dir/s$reps.toml" <<SPEC
name = "overhead"
[workload.command]
run = "echo samples/s: 5; : {v}"
metric_regex = 'samples/s: ([0-9.]+)'
[params]
v = [$values]
[search]
repeats = $reps
SPEC
done
for r in $(seq "$rounds"); do
    for reps in 1 3; do
        for bin in "$old" "$new"; do
            rm -rf "$dir/out"
            /usr/bin/time -f "round $r $bin repeats=$reps: %e s wall, %U s user, %S s sys" \
                "$bin" sweep "$dir/s$reps.toml" --out "$dir/out" --json >/dev/null
        done
    done
done
