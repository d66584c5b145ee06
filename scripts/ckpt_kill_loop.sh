#!/usr/bin/env bash
# The crash-safe save under SIGKILL (docs/checkpoints.md, "Saving: crash-safe, streaming"): runs
# `strata train`, saving every step, and kills it with SIGKILL at random moments, most of them
# while it saves; after each kill `latest` must name a checkpoint that `strata ckpt inspect
# --verify` passes, and every 10th iteration (and the last) `strata train --resume` must go on
# from it for one more step. The CI suite runs a short version (tests/tools/ckpt_kill_test.cpp).
#
#   scripts/ckpt_kill_loop.sh [--strata build/release/tools/strata] [--iterations 100]
#       [--seed N] [--path DIR]
#
# The model: a 3.2M-parameter GPT under ZeRO-3 with parameters and optimizer states on NVMe in a
# swap directory under DIR (default $TMPDIR or /tmp), so that a save writes 37 MiB of states into
# three state files, made by the step it follows (its `.TAG.partial` directory exists from before
# that step until the save ends). Each
# iteration starts a run (with --resume when `latest` exists), waits for 1 to 3 "saved" lines on
# its stderr and kills it: mostly within the next save, sometimes around that save's end (the
# rename, `latest`, the pruning) or anywhere; one iteration in ten at a random moment after start
# instead (the swap files of the killed run being reclaimed, the resume's load). The seed
# (printed; random without --seed) fixes these choices, so `--seed N` replays a failure's
# sequence (the moments follow the machine's speed). Checked after each kill: `latest` verifies,
# the tag it names has a manifest, its step never goes back, and the swap directory holds no
# more than one run's files; after each resume's clean exit the swap directory is empty. Counted:
# kills while a `.TAG.partial` directory this run wrote existed (mid-save), kills after a
# checkpoint was renamed into place but before `latest` named it; listed at the end: directories
# of the save directory left without a manifest (a prune the kill cut short). About 1 s an
# iteration on two cores; nothing is left behind. Exit status: 0 when every check passed.
set -euo pipefail

strata=""
iterations=100
seed=""
path="${TMPDIR:-/tmp}"

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --strata) strata="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --path) path="$2"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "ckpt_kill_loop.sh: unknown argument $1" >&2; usage ;;
  esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
[[ -n "$strata" ]] || strata="$here/build/release/tools/strata"
[[ -x "$strata" ]] || { echo "ckpt_kill_loop.sh: no strata binary at $strata; build it first or pass --strata" >&2; exit 2; }
[[ "$iterations" =~ ^[1-9][0-9]*$ ]] || { echo "ckpt_kill_loop.sh: --iterations is a positive integer" >&2; exit 2; }
[[ -z "$seed" ]] && seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
[[ "$seed" =~ ^[0-9]+$ ]] || { echo "ckpt_kill_loop.sh: --seed is a non-negative integer" >&2; exit 2; }
RANDOM=$seed
echo "ckpt_kill_loop.sh: seed $seed (replay: --seed $seed), $iterations iterations"

work="$(mktemp -d "$path/strata-kill-loop.XXXXXX")"
run_pid=""
cleanup() {
  # A second Ctrl-C (timeout(1) signals the script and then its whole process group) must not
  # cut the cleanup short.
  trap '' INT TERM
  if [[ -n "$run_pid" ]]; then kill -KILL "$run_pid" 2> /dev/null || true; wait "$run_pid" 2> /dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

config="$work/config.json"
save="$work/ckpt"
swap="$work/swap"
mkdir -p "$swap"
cat > "$config" << EOF
{
  "train_micro_batch_size_per_gpu": 1,
  "gradient_accumulation_steps": 1,
  "steps_per_print": 1000,
  "bf16": {"enabled": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
  "zero_optimization": {
    "stage": 3,
    "sub_group_size": 1e6,
    "reduce_bucket_size": 1e6,
    "stage3_prefetch_bucket_size": 8e5,
    "stage3_param_persistence_threshold": 1e4,
    "offload_param": {"device": "nvme", "nvme_path": "$swap", "pin_memory": false,
                      "buffer_count": 4, "buffer_size": 1e6, "max_in_cpu": 0},
    "offload_optimizer": {"device": "nvme", "nvme_path": "$swap", "pin_memory": false,
                          "buffer_count": 4}
  },
  "aio": {"block_size": 1048576, "queue_depth": 32},
  "strata": {
    "model": {"n_layer": 4, "n_head": 4, "d_model": 256, "seq_len": 32, "vocab": 256},
    "train_steps": 1000000,
    "seed": 7,
    "job_name": "kill-loop"
  }
}
EOF
"$strata" config check "$config" > /dev/null 2> "$work/check.log" || { cat "$work/check.log" >&2; exit 1; }
train=("$strata" train --config "$config" --save-dir "$save" --save-every 1 --keep-last 2
  --eval-every 1000000 --out "$work/out")

calc() { awk "BEGIN { printf \"%.3f\", $1 }"; }
step_of() { echo "${1#global_step}"; }

# Running estimates, measured as the lines arrive: the time between two "saved" lines of a run
# (a step and a save), a save's own time (the line says it) and from a run's start to its first
# "saved" line.
period_s=""
save_s=""
first_save_s=""
launched_at=""
saves=0
killed_at=""
landed=""
kills_mid_save=0
kills_mid_publish=0
early_kills=0
verify_failures=0
resume_failures=0
run_failures=0
swap_failures=0
reclaimed=0
last_step=0
had_latest=0

# Why one check failed, with what the run and the save directory looked like.
report_failure() {
  echo "iteration $1: FAILED: $2 (seed $seed)" >&2
  [[ -f "$work/run.err" ]] && { echo "-- the run's stderr, last lines:" >&2; tail -n 5 "$work/run.err" >&2; }
  echo "-- $save:" >&2
  ls -la "$save" >&2 2> /dev/null || true
}

# Reads the run's stderr (fd $1) into run.err until its $2-th "saved" line, updating the
# estimates; sets `saves` to how many it saw (fewer: the run ended, or printed nothing for 120 s).
await_saves() {
  local fd=$1 wanted=$2 line now previous=""
  saves=0
  while [[ $saves -lt $wanted ]] && IFS= read -r -t 120 -u "$fd" line; do
    printf '%s\n' "$line" >> "$work/run.err"
    [[ "$line" == *"[tools] [info] saved "* ]] || continue
    now=$EPOCHREALTIME
    saves=$((saves + 1))
    [[ "$line" =~ \ in\ ([0-9.]+)\ s ]] && save_s=${BASH_REMATCH[1]}
    if [[ $saves -eq 1 ]]; then first_save_s=$(calc "$now - $launched_at"); else period_s=$(calc "$now - $previous"); fi
    previous=$now
  done
}

# Starts a run and kills it at a moment drawn from the seed. One iteration in ten: at a random
# moment up to the usual time of a run's first save (never the first iteration, nor one with
# nothing to resume). The others count 1 to 3 "saved" lines, then: six in ten kill within the
# next save (its step first, then a random part of the save's duration, as the last "saved" line
# gave it); two in ten around that save's end (the rename, `latest`, the pruning); one in ten
# anywhere in 1.25 step-and-save periods. Sets `killed_at` to a phrase saying when; returns 1
# when the run ended by itself or hung.
kill_one_run() {
  local iteration=$1 resume=()
  [[ -f "$save/latest" ]] && resume=(--resume "$save")
  # Drawn whatever happens, so that the sequence of choices depends on the seed alone; RANDOM
  # read here, not in a $(...) subshell, which would not advance this shell's generator.
  local mode=$((RANDOM % 10)) saves_wanted=$((1 + RANDOM % 3)) permille=$((RANDOM % 1000))
  local early=$((mode == 0 && iteration > 1 && ${#resume[@]} > 0)) fd delay status=0
  [[ -z "$period_s" && $saves_wanted -lt 2 ]] && saves_wanted=2
  [[ $early -eq 1 ]] && saves_wanted=0
  rm -f "$work/stderr.fifo"
  mkfifo "$work/stderr.fifo"
  : > "$work/run.err"
  touch "$work/launched"
  # Bash reports a background job killed by a signal ("Killed") on its own stderr, whenever it
  # notices; that stderr is /dev/null until the job is reaped.
  exec {shell_err}>&2 2> /dev/null
  "${train[@]}" --steps 1000000 "${resume[@]}" > "$work/run.out" 2> "$work/stderr.fifo" &
  run_pid=$!
  exec {fd}< "$work/stderr.fifo"
  launched_at=$EPOCHREALTIME
  await_saves "$fd" "$saves_wanted"
  if [[ $early -eq 1 ]]; then
    delay=$(calc "$permille / 1000 * ${first_save_s:-1}")
    killed_at="$delay s after start"
  elif [[ $mode -le 2 ]]; then
    delay=$(calc "(0.9 + 0.2 * $permille / 1000) * $period_s")
    killed_at="$delay s after save $saves, near the next one's end"
  elif [[ $mode -le 3 ]]; then
    delay=$(calc "1.25 * $permille / 1000 * $period_s")
    killed_at="$delay s after save $saves, anywhere"
  else
    delay=$(calc "$period_s - $save_s + $permille / 1000 * $save_s")
    killed_at="$delay s after save $saves, in the next one"
  fi
  [[ $saves -ge $saves_wanted ]] && sleep "$delay"
  kill -KILL "$run_pid" || true
  cat <&"$fd" >> "$work/run.err"
  exec {fd}<&-
  wait "$run_pid" || status=$?
  run_pid=""
  exec 2>&"$shell_err" {shell_err}>&-
  grep -q "left by a previous run" "$work/run.err" && reclaimed=$((reclaimed + 1))
  [[ $status -eq 137 && $saves -ge $saves_wanted ]] && return 0
  if [[ $status -eq 137 ]]; then
    report_failure "$iteration" "the run hung: no \"saved\" line for 120 s (after $saves saves)"
  else
    report_failure "$iteration" "the run exited with status $status before it was killed (after $saves saves)"
  fi
  return 1
}

# The checks after a kill; returns 1 when `latest` is missing, does not verify or went back.
check_latest() {
  local iteration=$1 tag step
  if [[ ! -f "$save/latest" ]]; then
    [[ $had_latest -eq 0 ]] && return 0
    report_failure "$iteration" "$save/latest disappeared"
    return 1
  fi
  had_latest=1
  tag=$(< "$save/latest")
  if [[ ! -f "$save/$tag/manifest.json" ]]; then
    report_failure "$iteration" "latest names $tag, which has no manifest.json"
    return 1
  fi
  if ! "$strata" ckpt inspect "$save" --verify > "$work/inspect.log" 2>&1; then
    cat "$work/inspect.log" >&2
    report_failure "$iteration" "strata ckpt inspect --verify failed on latest ($tag)"
    return 1
  fi
  step=$(step_of "$tag")
  if [[ $step -lt $last_step ]]; then
    report_failure "$iteration" "latest went back from global_step$last_step to $tag"
    return 1
  fi
  last_step=$step
}

# Where the kill landed: in a save (a partial directory this run wrote to), or between the
# rename of a checkpoint into place and `latest` naming it (a checkpoint this run completed that
# is newer than the one `latest` names).
classify_kill() {
  landed="outside a save"
  if [[ -n "$(find "$save" -maxdepth 1 -name '.*.partial' -newer "$work/launched" 2> /dev/null)" ]]; then
    kills_mid_save=$((kills_mid_save + 1))
    landed="mid-save"
  fi
  [[ -f "$save/latest" ]] || return 0
  local latest_step dir
  latest_step=$(step_of "$(< "$save/latest")")
  for dir in "$save"/global_step*; do
    if [[ "$dir/manifest.json" -nt "$work/launched" && $(step_of "$(basename "$dir")") -gt $latest_step ]]; then
      kills_mid_publish=$((kills_mid_publish + 1))
      landed="between rename and latest"
      break
    fi
  done
  return 0
}

# The swap directory of a killed run holds one run's files; the next run reclaims them.
check_swap() {
  local iteration=$1
  find "$swap" -mindepth 1 | sort > "$work/swap.now"
  if [[ ! -f "$work/swap.first" ]]; then
    cp "$work/swap.now" "$work/swap.first"
    return 0
  fi
  if [[ -n "$(comm -13 "$work/swap.first" "$work/swap.now")" ]]; then
    report_failure "$iteration" "the swap directory holds files no earlier run left: $(comm -13 "$work/swap.first" "$work/swap.now" | tr '\n' ' ')"
    return 1
  fi
}

# One more step from `latest`: resumes from it, trains, saves and exits cleanly.
check_resume() {
  local iteration=$1 status=0 tag
  tag=$(< "$save/latest")
  timeout 300 "${train[@]}" --steps $((last_step + 1)) --resume "$save" \
    > "$work/resume.out" 2> "$work/run.err" || status=$?
  if [[ $status -ne 0 ]] || ! grep -q "resumed from $save/$tag (step $last_step)" "$work/run.err" \
    || ! grep -q "trained 1 steps" "$work/resume.out"; then
    report_failure "$iteration" "strata train --resume from $tag exited with status $status"
    return 1
  fi
  [[ "$(< "$save/latest")" == "global_step$((last_step + 1))" ]] || { report_failure "$iteration" "the resumed run's save is not latest"; return 1; }
  # A clean exit removes its swap files: what killed runs left is gone too.
  if [[ -n "$(ls -A "$swap")" ]]; then
    report_failure "$iteration" "a clean exit left files in the swap directory: $(find "$swap" -mindepth 1 | tr '\n' ' ')"
    swap_failures=$((swap_failures + 1))
  fi
}

started=$SECONDS
for ((iteration = 1; iteration <= iterations; ++iteration)); do
  if ! kill_one_run "$iteration"; then
    run_failures=$((run_failures + 1))
  fi
  [[ "$killed_at" == *start ]] && early_kills=$((early_kills + 1))
  classify_kill
  check_latest "$iteration" || verify_failures=$((verify_failures + 1))
  check_swap "$iteration" || swap_failures=$((swap_failures + 1))
  if [[ ( $((iteration % 10)) -eq 0 || $iteration -eq $iterations ) && -f "$save/latest" ]]; then
    if check_resume "$iteration"; then
      check_latest "$iteration" || verify_failures=$((verify_failures + 1))
    else
      resume_failures=$((resume_failures + 1))
    fi
  fi
  echo "iteration $iteration: killed $killed_at ($landed), latest $(cat "$save/latest" 2> /dev/null || echo none)"
done
# After the last (clean) save: a kill while pruning can leave an old checkpoint half removed, and
# without its manifest later prunes leave it alone; a partial directory of a tag no save took up
# again would stay too. Reported, not failed: disk leaks, which `latest` never names.
leftovers=0
for dir in "$save"/global_step* "$save"/.*.partial; do
  if [[ -d "$dir" && ! -f "$dir/manifest.json" ]]; then
    leftovers=$((leftovers + 1))
    echo "left in $save: $(basename "$dir")/ ($(find "$dir" -type f -printf '%f ' | sed 's/ $//'))"
  fi
done

failures=$((verify_failures + resume_failures + run_failures + swap_failures))
echo "ckpt_kill_loop: $iterations iterations, $kills_mid_save kills mid-save," \
  "$kills_mid_publish between rename and latest, $early_kills at random moments after start;" \
  "$verify_failures verify failures, $resume_failures resume failures, $run_failures run failures," \
  "$swap_failures swap failures; swap reclaimed $reclaimed times, $leftovers directories left" \
  "without a manifest; latest global_step$last_step; seed $seed; $((SECONDS - started)) s"
[[ $failures -eq 0 ]]
