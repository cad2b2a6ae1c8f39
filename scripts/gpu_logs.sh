# Sourced by the device scripts (scripts/gpu_*.sh): `. scripts/gpu_logs.sh NAME`.
# A device call brings back at most 8 files from $OUT, and these scripts write a log per step (up to
# ~20), so the logs go to a folder of their own, $L, and come back as one archive at exit, also when
# the script is stopped by a timeout's SIGTERM: $OUT/NAME_logs.tgz (`tar xzf` it where the call's
# files land). Files meant to come back alone (ncu reports) are still written to $OUT.
OUT=${OUT:-/tmp/gdp_$1}; mkdir -p "$OUT"
L=$(mktemp -d "/tmp/gdp_$1_logs.XXXXXX")
trap "tar czf '$OUT/$1_logs.tgz' -C '$L' ." EXIT
