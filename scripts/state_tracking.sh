#!/usr/bin/env bash
# The state-tracking study (DeltaProduct paper, Fig. 1 and the S3 README table) with `gdp tasks`:
# one layer, hidden 128, 8 heads x 32, no short conv, no gates, expand_v 1, AdamW 1e-3 cosine,
# trained on words of length 128 and tested on 512. The grid (16 runs, each a folder under --out):
#   S3_hh_nh{1,2}_b{01,02}         householder, n_h in {1,2} x beta in (0,1) / (0,2)
#   S5_hh_nh{1,2,3,4}_b02          householder, n_h in {1..4}, beta in (0,2)
#   {S3,S5}_split_r{2,4}_{id,learned}  split mode, r in {2,4}, frozen identity / learned mask, beta in (0,2)
# A run whose folder already holds result.txt is skipped, so the grid can be run in pieces
# (--only REGEX picks runs by name; device time is limited). At the end the table of every
# finished run, ours beside the paper's expected outcome, is written into docs/state_tracking.md
# between the markers of --table (gpu or cpu), with combined plots in the --out folder.
# --seeds 1,2,3 runs every selected configuration once per seed (folders NAME_seedS) and the table
# gives each configuration's mean over the seeds with the range, and how many seeds learned it.
#
#   scripts/state_tracking.sh --list                           # the run names
#   scripts/state_tracking.sh --only 'S3_hh'                   # the S3 householder runs (GPU defaults)
#   scripts/state_tracking.sh --only 'S5_hh_nh4'
#   scripts/state_tracking.sh                                  # everything not yet done
#   scripts/state_tracking.sh --table-only                     # just rewrite the table from the folders
#   scripts/state_tracking.sh --device cpu --steps 500 --batch 32 --test-seqs 512 --jobs 2 \
#       --only 'S3_hh' --out runs/state_tracking_cpu --table cpu   # the CPU-reduced run
set -euo pipefail

BUILD=${BUILD:-build}
DEVICE=cuda
STEPS=3000
BATCH=512
LR=1e-3
TEST_SEQS=2048
EVAL_EVERY=250
EARLY_STOP=0.99
SEEDS=1
JOBS=1
ONLY=""
OUT=runs/state_tracking
TABLE=""
DOC=docs/state_tracking.md
TABLE_ONLY=0
LIST=0
FORCE=0
EXTRA=()

usage() {
    sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'
    cat <<EOF

options:
  --only REGEX       runs whose name matches (grep -E); default all
  --device DEV       cuda (default) or cpu
  --steps N          optimizer steps per run (default $STEPS; early stop may end sooner)
  --batch N          words per step (default $BATCH; the paper: 2048)
  --lr LR            peak learning rate (default $LR, cosine to 0)
  --test-seqs N      test words of length 512 (default $TEST_SEQS)
  --eval-every N     accuracy check at length 128 every N steps (default $EVAL_EVERY)
  --early-stop ACC   stop a run once a check reaches ACC (default $EARLY_STOP, as the paper; 0 = off)
  --seed N           seed (default $SEEDS)
  --seeds LIST       several seeds, comma-separated (e.g. 1,2,3): each configuration once per seed
  --jobs N           runs at a time (default $JOBS; on the cpu give each its own core)
  --out DIR          folder of the run folders (default $OUT)
  --table gpu|cpu    which table of $DOC to write (default: gpu for cuda, cpu for cpu)
  --doc FILE         the document (default $DOC)
  --force            rerun runs that have a result
  --table-only       only write the table and plots from the existing run folders
  --list             print the run names and exit
  --                 the rest goes to every gdp tasks call (e.g. -- --eval-batch 256)
environment: BUILD (default build): the build folder holding gdp
EOF
}

while [ $# -gt 0 ]; do
    case "$1" in
        --only) ONLY=$2; shift 2 ;;
        --device) DEVICE=$2; shift 2 ;;
        --steps) STEPS=$2; shift 2 ;;
        --batch) BATCH=$2; shift 2 ;;
        --lr) LR=$2; shift 2 ;;
        --test-seqs) TEST_SEQS=$2; shift 2 ;;
        --eval-every) EVAL_EVERY=$2; shift 2 ;;
        --early-stop) EARLY_STOP=$2; shift 2 ;;
        --seed|--seeds) SEEDS=$2; shift 2 ;;
        --jobs) JOBS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --table) TABLE=$2; shift 2 ;;
        --doc) DOC=$2; shift 2 ;;
        --force) FORCE=1; shift ;;
        --table-only) TABLE_ONLY=1; shift ;;
        --list) LIST=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "state_tracking.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -n "$TABLE" ] || { [ "$DEVICE" = cpu ] && TABLE=cpu || TABLE=gpu; }
case "$TABLE" in gpu|cpu) ;; *) echo "state_tracking.sh: --table '$TABLE': use gpu or cpu" >&2; exit 2 ;; esac
IFS=, read -r -a SEED_LIST <<<"$SEEDS"
for s in "${SEED_LIST[@]}"; do
    case "$s" in ''|*[!0-9]*) echo "state_tracking.sh: --seeds '$SEEDS': give seeds as numbers, e.g. 1,2,3" >&2; exit 2 ;; esac
done
MULTI=0
[ ${#SEED_LIST[@]} -gt 1 ] && MULTI=1
# the folder of one run: NAME with one seed, NAME_seedS with several
dir_of() { if [ $MULTI -eq 1 ]; then echo "$OUT/$1_seed$2"; else echo "$OUT/$1"; fi; }

# ---- the grid: name and gdp tasks flags -----------------------------------------------------------
RUNS=()
declare -A FLAGS
add() { RUNS+=("$1"); FLAGS[$1]=$2; }
for nh in 1 2; do
    for b in 01 02; do
        add "S3_hh_nh${nh}_b${b}" "--group S3 --mode householder --n-h $nh --neg-eigval $([ $b = 02 ] && echo 1 || echo 0)"
    done
done
for nh in 1 2 3 4; do add "S5_hh_nh${nh}_b02" "--group S5 --mode householder --n-h $nh --neg-eigval 1"; done
for g in S3 S5; do
    for r in 2 4; do
        for m in id learned; do
            add "${g}_split_r${r}_${m}" "--group $g --mode split --n-h $r --neg-eigval 1 --mask $([ $m = id ] && echo identity || echo learned)"
        done
    done
done

selected() { [ -z "$ONLY" ] || printf '%s\n' "$1" | grep -Eq -- "$ONLY"; }

if [ $LIST -eq 1 ]; then
    for r in "${RUNS[@]}"; do selected "$r" && printf '%-22s gdp tasks %s\n' "$r" "${FLAGS[$r]}"; done
    exit 0
fi

GDP="$BUILD/gdp"
if [ ! -x "$GDP" ]; then
    echo "== building $GDP"
    make BUILD="$BUILD" -j"$(nproc)" "$GDP"
fi
mkdir -p "$OUT"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

# ---- the runs --------------------------------------------------------------------------------------
run_one() {
    local name=$1 seed=$2 dir
    dir=$(dir_of "$1" "$2")
    # shellcheck disable=SC2086 # FLAGS holds several words on purpose
    "$GDP" tasks ${FLAGS[$name]} --train-len 128 --test-len 512 --steps "$STEPS" --batch "$BATCH" --lr "$LR" \
        --test-seqs "$TEST_SEQS" --eval-every "$EVAL_EVERY" --early-stop "$EARLY_STOP" --seed "$seed" \
        --device "$DEVICE" --print-every 100 --out "$dir" ${EXTRA[@]+"${EXTRA[@]}"} >"$dir.log" 2>&1
}

if [ $TABLE_ONLY -eq 0 ]; then
    running=0
    failed=()
    for seed in "${SEED_LIST[@]}"; do
        for name in "${RUNS[@]}"; do
            selected "$name" || continue
            dir=$(dir_of "$name" "$seed")
            if [ -s "$dir/result.txt" ] && [ $FORCE -eq 0 ]; then
                echo "== ${dir#"$OUT"/}: done before ($dir/result.txt); --force reruns it"
                continue
            fi
            rm -rf "${dir:?}"
            mkdir -p "$dir"
            echo "== ${dir#"$OUT"/}: gdp tasks ${FLAGS[$name]} --seed $seed${EXTRA[*]+ ${EXTRA[*]}} (log: $dir.log)"
            if [ "$JOBS" -le 1 ]; then
                run_one "$name" "$seed" || failed+=("${dir#"$OUT"/}")
                grep '^result:' "$dir.log" || tail -5 "$dir.log"
            else
                run_one "$name" "$seed" &
                running=$((running + 1))
                if [ $running -ge "$JOBS" ]; then wait -n || true; running=$((running - 1)); fi
            fi
        done
    done
    wait || true
    if [ "$JOBS" -gt 1 ]; then
        for seed in "${SEED_LIST[@]}"; do
            for name in "${RUNS[@]}"; do
                dir=$(dir_of "$name" "$seed")
                if selected "$name" && [ -f "$dir.log" ]; then
                    grep '^result:' "$dir.log" || echo "${dir#"$OUT"/}: no result (see $dir.log)"
                fi
            done
        done
    fi
    [ ${#failed[@]} -eq 0 ] || echo "failed: ${failed[*]} (see their .log files)"
fi

# ---- the table -------------------------------------------------------------------------------------
expected() {
    case "$1" in
        S3_hh_nh1_b01) echo "fails (paper README: needs negative eigenvalues and n_h >= 2)" ;;
        S3_hh_nh1_b02) echo "fails (paper README: a single layer needs n_h >= 2 for S3)" ;;
        S3_hh_nh2_b01) echo "fails (paper README: negative eigenvalues are required)" ;;
        S3_hh_nh2_b02) echo "learns; the only S3 config that does" ;;
        S5_hh_nh1_b02|S5_hh_nh2_b02) echo "fails at once (Fig. 1: ~0 almost immediately)" ;;
        S5_hh_nh3_b02) echo "~1.0 only below L ~20, 0 by ~50 (Fig. 1)" ;;
        S5_hh_nh4_b02) echo "~1.0 to L ~200, ~0.5 at ~330, ~0 by 512 (Fig. 1)" ;;
        *_split_*) echo "not in the paper (our split variant)" ;;
    esac
}
field() { awk -F'\t' -v k="$2" '$1 == k { print $2 }' "$1"; }
# "mean (min-max)" of one result field over the seeds' result files; FORMAT is printf's for one value
spread() {
    local key=$1 fmt=$2; shift 2
    for f in "$@"; do field "$f" "$key"; done | awk -v fmt="$fmt" '
        { v[NR] = $1; s += $1; if (NR == 1 || $1 < lo) lo = $1; if (NR == 1 || $1 > hi) hi = $1 }
        END { m = sprintf(fmt, s / NR); a = sprintf(fmt, lo); b = sprintf(fmt, hi)
              if (a == b) print m; else print m " (" a "-" b ")" }'
}
row_of_seeds() {
    local name=$1 files=() s f
    for s in "${SEED_LIST[@]}"; do
        f="$(dir_of "$name" "$s")/result.txt"
        [ -s "$f" ] && files+=("$f")
    done
    [ ${#files[@]} -gt 0 ] || return 0
    local learned=0
    for f in "${files[@]}"; do
        awk -v a="$(field "$f" acc_train_len)" 'BEGIN { exit !(a >= 0.9) }' && learned=$((learned + 1))
    done
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s/%s | %s |\n' "$name" "$(field "${files[0]}" label)" \
        "${#files[@]}" "$(spread steps %.0f "${files[@]}")" "$(spread acc_train_len %.3f "${files[@]}")" \
        "$(spread acc_test_len %.3f "${files[@]}")" "$(spread len_90 %.0f "${files[@]}")" \
        "$(spread token_acc %.3f "${files[@]}")" "$(spread last_loss %.4f "${files[@]}")" "$learned" "${#files[@]}" \
        "$(expected "$name")"
}
row_of() {
    local name=$1 f="$OUT/$1/result.txt"
    [ $MULTI -eq 1 ] && { row_of_seeds "$name"; return; }
    [ -s "$f" ] || return 0
    local desc
    desc=$(field "$f" label)
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$desc" "$(field "$f" steps)" \
        "$(printf '%.3f' "$(field "$f" acc_train_len)")" "$(printf '%.3f' "$(field "$f" acc_test_len)")" \
        "$(field "$f" len_90)" "$(printf '%.3f' "$(field "$f" token_acc)")" "$(printf '%.4f' "$(field "$f" last_loss)")" \
        "$(expected "$name")"
}

TABLE_FILE=$(mktemp)
trap 'rm -f "$TABLE_FILE"' EXIT
{
    first=$(for n in "${RUNS[@]}"; do for s in "${SEED_LIST[@]}"; do
        f="$(dir_of "$n" "$s")/result.txt"; [ -s "$f" ] && echo "$f" && break 2; done; done || true)
    if [ -n "$first" ]; then
        echo "Settings (from \`$first\`): model $(field "$first" model); device $(field "$first" device)," \
             "batch $(field "$first" batch), at most $(field "$first" steps_max) steps (early stop at accuracy" \
             "$(field "$first" early_stop) at length 128, checked every $(field "$first" eval_every) steps; 0 = off)," \
             "lr $(field "$first" lr) cosine to 0, $(field "$first" test_seqs) test words of length" \
             "$(field "$first" test_len), $([ $MULTI -eq 1 ] && echo "seeds $SEEDS (each cell: the mean, and the range" \
             "over the seeds where they differ; learned: the seeds with acc@128 >= 0.9)" || echo "seed $(field "$first" seed)")." \
             "Folder: \`$OUT\`; table written by" \
             "\`scripts/state_tracking.sh\` on $(date -u +%Y-%m-%d)."
        echo
    fi
    if [ $MULTI -eq 1 ]; then
        echo "| run | config | seeds | steps | acc@128 | acc@512 | L(acc>=0.9) | per-position acc | final loss | learned | paper's expected outcome |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|"
    else
        echo "| run | config | steps | acc@128 | acc@512 | L(acc>=0.9) | per-position acc | final loss | paper's expected outcome |"
        echo "|---|---|---|---|---|---|---|---|---|"
    fi
    n_rows=0
    for n in "${RUNS[@]}"; do
        r=$(row_of "$n")
        [ -n "$r" ] && { echo "$r"; n_rows=$((n_rows + 1)); }
    done
    [ $n_rows -gt 0 ] || echo "| (no finished runs in \`$OUT\`) |"
} >"$TABLE_FILE"

if [ -f "$DOC" ] && grep -q "<!-- table:$TABLE:begin -->" "$DOC"; then
    awk -v b="<!-- table:$TABLE:begin -->" -v e="<!-- table:$TABLE:end -->" -v tf="$TABLE_FILE" '
        $0 == b { print; while ((getline l < tf) > 0) print l; skip = 1; next }
        $0 == e { skip = 0 }
        !skip { print }' "$DOC" >"$DOC.tmp" && mv "$DOC.tmp" "$DOC"
    echo "== table written into $DOC ($TABLE)"
else
    echo "== $DOC has no '<!-- table:$TABLE:begin -->' marker; the table:"
fi
cat "$TABLE_FILE"

# ---- combined plots (one per group and mode) ------------------------------------------------------
for set in S3_hh S5_hh S3_split S5_split; do
    dirs=()
    for n in "${RUNS[@]}"; do
        for s in "${SEED_LIST[@]}"; do
            d=$(dir_of "$n" "$s")
            case "$n" in "$set"_*) [ -s "$d/accuracy.tsv" ] && dirs+=("$d") ;; esac
        done
    done
    [ ${#dirs[@]} -gt 0 ] && "$GDP" tasks --plot "$OUT/$set" "${dirs[@]}"
done
exit 0
