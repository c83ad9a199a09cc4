#!/usr/bin/env bash
# A tensor-parallel server's cold start on one cache dir (issue 30, item 1): N processes start at
# once on one empty dir, all wanting the same variants; each key is compiled once in total, and a
# second wave on the now-warm dir compiles nothing. Each process's time to ready is reported
# (median, max).
#   Without a GPU (CI): N = the CPU cores (at least 2), each process `kvjit prewarm --arch sm_90`
#   of the same variants: the compile-once part. (Many processes x threads of the generic loader
#   on one dir are test_stress's; this is the same promise through the ops' prewarm and bundles.)
#   With GPUs: N = the GPUs (up to 8), process i on GPU i alone (CUDA_VISIBLE_DEVICES=i) running
#   `test_gpu_multi --tp-worker`: one store_kv_cache checked byte for byte, its time from main()
#   to the finished first launch; waves: empty dir, warm dir, warm dir with KVJIT_COMPILE=never.
#   Never run on a machine with more than one GPU yet.
# Usage: bash tests/test_tp_cold_start.sh /path/to/kvjit [/path/to/test_gpu_multi]
set -u
KVJIT=${1:?usage: test_tp_cold_start.sh /path/to/kvjit [/path/to/test_gpu_multi]}
WORKER=${2:-}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvjit-tp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# median and max of the numbers in file $1, one a line
stats() { sort -g "$1" | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2; printf "median %.1f ms, max %.1f ms", m, v[NR]}'; }

now_ms() { date +%s%3N; }

# wave NAME N DIR CMD...: N copies of CMD at once (the placeholder @I@ is the process number),
# each one's stdout in $TMP/NAME.I and its milliseconds to exit in $TMP/NAME.ms.
wave() {
  local name=$1 n=$2 pids=() i
  shift 2
  : > "$TMP/$name.ms"
  for ((i = 0; i < n; i++)); do
    (
      start=$(now_ms)
      "${@//@I@/$i}" > "$TMP/$name.$i" 2>&1
      rc=$?
      echo "$(( $(now_ms) - start ))" >> "$TMP/$name.ms"
      exit $rc
    ) &
    pids+=($!)
  done
  local bad=0
  for i in "${!pids[@]}"; do wait "${pids[$i]}" || { bad=1; echo "process $i of $name failed:"; cat "$TMP/$name.$i"; }; done
  return $bad
}

# ---- without a GPU: N prewarm processes --------------------------------------------------------
N=$(nproc)
(( N < 2 )) && N=2
(( N > 8 )) && N=8
VARIANTS=(--arch sm_90 --k-row-bytes 1024,2048 --index int32,int64 -j 1)
"$KVJIT" prewarm "${VARIANTS[@]}" --cache-dir "$TMP/probe" > "$TMP/probe.out" 2>&1 ||
  { echo "SKIP: kvjit prewarm cannot compile here (no NVRTC?):"; cat "$TMP/probe.out"; exit 77; }
total=$(sed -n 's/^prewarm: .*kernels: \([0-9]*\) compiled, \([0-9]*\) already cached.*/\1/p' "$TMP/probe.out")
entries=$("$KVJIT" cache ls --cache-dir "$TMP/probe" | sed -n 's/^\([0-9]*\) entries.*/\1/p')
[[ -n $total && -n $entries ]] || fail "could not read the probe's kernels and entries: $(cat "$TMP/probe.out")"

for round in cold warm; do
  wave "cpu-$round" "$N" "$KVJIT" prewarm "${VARIANTS[@]}" --cache-dir "$TMP/shared" || fail "a $round prewarm failed"
  compiled=$(cat "$TMP"/cpu-$round.[0-9]* | sed -n 's/^prewarm: .*kernels: \([0-9]*\) compiled.*/\1/p' | awk '{s+=$1} END {print s+0}')
  want=$total
  [[ $round == warm ]] && want=0
  got_entries=$("$KVJIT" cache ls --cache-dir "$TMP/shared" | sed -n 's/^\([0-9]*\) entries.*/\1/p')
  echo "cpu $round: $N processes: $compiled kernels compiled in total ($want expected), $got_entries entries ($entries expected); time to ready $(stats "$TMP/cpu-$round.ms")"
  [[ $compiled == "$want" ]] || fail "$round: $compiled kernels compiled by $N processes, expected $want (one compile per key)"
  [[ $got_entries == "$entries" ]] || fail "$round: $got_entries entries, expected $entries"
done

# ---- with GPUs: one process per GPU ------------------------------------------------------------
gpus=$("$KVJIT" info 2>/dev/null | grep -c '^gpu [0-9]*:')
if [[ -z $WORKER || $gpus == 0 ]]; then
  echo "ok - cpu part ($N processes); gpu part not run: ${gpus} GPU(s)"
  exit 0
fi
(( gpus > 8 )) && gpus=8
# The compiles one process alone makes on an empty dir: the keys the waves want.
KVJIT_CACHE_DIR="$TMP/gpu-probe" CUDA_VISIBLE_DEVICES=0 "$WORKER" --tp-worker > "$TMP/gpu-probe.out" 2>&1 ||
  fail "the probe process failed: $(cat "$TMP/gpu-probe.out")"
keys=$(sed -n 's/.*first_launch_ms=[0-9.]* compiles=\([0-9]*\).*/\1/p' "$TMP/gpu-probe.out")
export KVJIT_CACHE_DIR="$TMP/gpu"
for round in cold warm never; do
  if [[ $round == never ]]; then export KVJIT_COMPILE=never; fi
  wave "gpu-$round" "$gpus" env CUDA_VISIBLE_DEVICES=@I@ "$WORKER" --tp-worker || fail "a $round gpu process failed"
  compiles=$(cat "$TMP"/gpu-$round.[0-9]* | sed -n 's/.*first_launch_ms=[0-9.]* compiles=\([0-9]*\).*/\1/p' | awk '{s+=$1} END {print s+0}')
  firsts=$(cat "$TMP"/gpu-$round.[0-9]* | sed -n 's/.*first_launch_ms=\([0-9.]*\) .*/\1/p')
  echo "$firsts" > "$TMP/gpu-$round.first"
  want=0
  [[ $round == cold ]] && want=$keys
  echo "gpu $round: $gpus processes, one per GPU: $compiles compiles in total ($want expected); first launch $(stats "$TMP/gpu-$round.first") (process wall $(stats "$TMP/gpu-$round.ms"))"
  [[ $compiles == "$want" ]] || fail "$round: $compiles compiles by $gpus processes, expected $want (one per key)"
done
unset KVJIT_COMPILE
echo "ok - cpu part ($N processes), gpu part ($gpus processes, $keys keys compiled once)"
