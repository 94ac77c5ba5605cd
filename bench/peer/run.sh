#!/usr/bin/env bash
# The peer harness: one column (LM x dataset) of dsp and DSPy side by side, on the same LM server, the same
# RM server and the same test questions. Resumable and cached: rerun the same command after a kill.
#
#   bash bench/peer/run.sh --lm gemma|smollm2|smollm2-text --dataset nq|squad|hotpotqa [--n N] [--only P1,P2] [--skip P]
#                          [--threads T] [--rs-candidates auto|N] [--dspy-seeds 0,1,2] [--out DIR] [--work DIR]
#                          [--port-base P] [--compile-args "--candidates 2 --val 10 --bootstrap 4"]
#                          [--compile-tag NAME] [--compile-only] [--list]
#
# Units (see `--list`): dsp:vanilla-seed0, dsp:rtr-seed0..4, dsp:small-seed0, dsp:compiled-seed0..2 (dsp
# compile, then dsp run --compiled), dspy:PROGRAM-OPTIMIZER-ADAPTER-seedS. --only / --skip take comma-separated
# patterns: a unit name, a prefix of it ending at "-" (dspy:rtr_predict-labeled = both adapters) or a glob.
# --compile-tag NAME names a compiler's files apart (-NAME in every compiled unit's file names: a changed
# compiler never resumes or reports another's); --compile-only compiles without running the test questions.
# Results (traces cut) go to OUT/<lm>/<dataset>/ (default results/peer), everything else (caches, full
# rows, DSPy's raw rows, logs) to WORK/<lm>/<dataset>/ (default runs/peer). See bench/peer/README.md.
set -euo pipefail
set -m  # job control: each unit runs in a process group of its own, which an interrupt stops whole

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/bench/peer"
PY="$ROOT/.venv/bin/python"
DSP="$ROOT/.venv/bin/dsp"
DSPY_VENV="$ROOT/.venv-peer-dspy"

LM="" DATASET="" N="" ONLY="" SKIP="" THREADS="" RS_CANDIDATES=auto DSPY_SEEDS="" OUT_ROOT="$ROOT/results/peer"
WORK_ROOT="$ROOT/runs/peer" PORT_BASE="" LIST=0 COMPILE_ARGS_GIVEN="" COMPILE_NAME="" COMPILE_ONLY=0

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lm) LM="$2"; shift 2 ;;
    --dataset) DATASET="$2"; shift 2 ;;
    --n) N="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --skip) SKIP="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --rs-candidates) RS_CANDIDATES="$2"; shift 2 ;;
    --dspy-seeds) DSPY_SEEDS="$2"; shift 2 ;;
    --out) OUT_ROOT="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
    --work) WORK_ROOT="$(mkdir -p "$2" && cd "$2" && pwd)"; shift 2 ;;
    --port-base) PORT_BASE="$2"; shift 2 ;;
    --compile-args) COMPILE_ARGS_GIVEN="$2"; shift 2 ;;
    --compile-tag) COMPILE_NAME="$2"; shift 2 ;;
    --compile-only) COMPILE_ONLY=1; shift ;;
    --list) LIST=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n "$LM" && -n "$DATASET" ]] || { echo "run.sh: --lm and --dataset are required" >&2; usage; }
cfg() { "$PY" "$HERE/config.py" "$@"; }
cfg models | grep -x "$LM" > /dev/null || { echo "run.sh: --lm must be one of: $(cfg models | tr '\n' ' ')" >&2; exit 2; }
case "$DATASET" in nq|squad|hotpotqa) ;; *) echo "run.sh: --dataset must be nq, squad or hotpotqa" >&2; exit 2 ;; esac
[[ -z "$N" || "$N" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --n takes a positive integer" >&2; exit 2; }
[[ -z "$COMPILE_NAME" || "$COMPILE_NAME" =~ ^[A-Za-z0-9_]+$ ]] || { echo "run.sh: --compile-tag takes letters, digits and _" >&2; exit 2; }
[[ "$RS_CANDIDATES" == auto || "$RS_CANDIDATES" =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: --rs-candidates auto|N" >&2; exit 2; }

mapfile -t UNITS < <(cfg units "$LM" "$DATASET" "$DSPY_SEEDS" "$ONLY" "$SKIP")
if [[ $LIST == 1 ]]; then printf '%s\n' "${UNITS[@]}"; exit 0; fi
[[ ${#UNITS[@]} -gt 0 ]] || { echo "run.sh: --only/--skip leave nothing to run (see --list)" >&2; exit 2; }
: "${DSP_DATA_DIR:?run.sh: set DSP_DATA_DIR to the data mirror (e.g. ../shared/data)}"
export DSP_DATA_DIR

SPLIT="$(cfg split "$DATASET")"
W="$WORK_ROOT/$LM/$DATASET"
R="$OUT_ROOT/$LM/$DATASET"
mkdir -p "$W/logs" "$W/dsp" "$W/compiled" "$R"
# A fresh work folder (a new machine) resumes dsp's units from the committed results files: dsp run needs
# a row's index, fingerprint and error to resume, not its traces. DSPy's units resume from theirs too:
# `peer.py restore` (after `prepare`, below) turns their rows back into raw rows and copies their
# compiled programs back.
for kept in "$R"/*.jsonl; do
  [[ -e "$kept" && "$(basename "$kept")" != *-dspy-* && ! -e "$W/dsp/$(basename "$kept")" ]] || continue
  cp "$kept" "$W/dsp/"
done
export DSP_CACHEDIR="$W/cache-dsp"   # dsp's cache for this column (runs, compiles, the RM server)
GATE_PORT="$(cfg port "$LM" "$DATASET" ${PORT_BASE:+"$PORT_BASE"})"
GATE="http://127.0.0.1:$GATE_PORT"
LM_SPEC="$(cfg dsp-lm "$LM" "$GATE")"
RM_SPEC="colbertv2:$GATE/rm/api/search"
NARG=(); [[ -n "$N" ]] && NARG=(--n "$N")
# dsp compile's arguments: RESULTS.md's (config.COMPILE_ARGS), or --compile-args for a cheaper trial, whose
# compiled program then has a name of its own (never taken for the real one by a later run).
if [[ -n "$COMPILE_ARGS_GIVEN" ]]; then
  read -r -a COMPILE_ARGS <<< "$COMPILE_ARGS_GIVEN"
  COMPILE_TAG="-$(printf '%s' "$COMPILE_ARGS_GIVEN" | tr -c 'A-Za-z0-9' '_' | tr -s '_' | sed 's/^_//; s/_$//')"
else
  mapfile -t COMPILE_ARGS < <(cfg compile-args "$DATASET")
  COMPILE_TAG=""
fi
COMPILE_TAG="$COMPILE_TAG${COMPILE_NAME:+-$COMPILE_NAME}"
log() { echo "[$(date +%H:%M:%S)] $*"; }

# -- DSPy in its own venv, pinned, installed here if missing (never a dependency of the project) ----------
VERSION="$(cfg dspy-version)"
mapfile -t DSPY_REQUIREMENTS < <(cfg dspy-requirements)
if [[ " ${UNITS[*]} " == *" dspy:"* ]]; then
  if ! "$DSPY_VENV/bin/python" -c "import dspy, numpy, optuna, sys; sys.exit(dspy.__version__ != '$VERSION')" 2>/dev/null; then
    log "installing ${DSPY_REQUIREMENTS[*]} into $DSPY_VENV"
    python3 -m venv "$DSPY_VENV"
    "$DSPY_VENV/bin/pip" install -q "${DSPY_REQUIREMENTS[@]}" > "$W/logs/dspy-install.log" 2>&1 \
      || { echo "run.sh: pip install ${DSPY_REQUIREMENTS[*]} failed; see $W/logs/dspy-install.log" >&2; exit 1; }
  fi
fi

# -- servers: the LM and the RM on free loopback ports, the gate on the column's fixed port ---------------
PIDS=() UNIT_PID=""
cleanup() {
  local pid
  if [[ -n "$UNIT_PID" ]]; then  # the unit running, and its children
    kill -- -"$UNIT_PID" 2>/dev/null || true
    # Up to 10 s for it to exit before the servers stop: a DSPy compile's last ledger checkpoint (on
    # SIGTERM) reads the gate's counters, and would otherwise leave its final minute's requests uncounted.
    for _ in {1..20}; do kill -0 -- -"$UNIT_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM
free_port() { "$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"; }
wait_for() {  # URL SECONDS NAME LOG PID
  local deadline=$((SECONDS + $2))
  until curl -sf -o /dev/null "$1"; do
    kill -0 "$5" 2>/dev/null || { echo "run.sh: the $3 exited; see $4" >&2; tail -5 "$4" >&2; exit 1; }
    (( SECONDS < deadline )) || { echo "run.sh: the $3 did not answer $1 within $2 s; see $4" >&2; exit 1; }
    sleep 1
  done
}
# With SO_REUSEADDR, as the gate binds: a port left in TIME_WAIT by the last run is free, a listening one is not.
if ! "$PY" -c "import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', $GATE_PORT))" 2>/dev/null; then
  echo "run.sh: port $GATE_PORT (this column's gate) is in use. The column's results files name this port in" \
       "their identity, so a rerun must use the same one: stop what holds it (another run.sh of this column?)" \
       "or, for a new column folder, pass --port-base." >&2
  exit 1
fi

log "column $LM x $DATASET ($SPLIT split${N:+, first $N questions}): work $W, results $R"
"$PY" "$HERE/peer.py" prepare --dataset "$DATASET" "${NARG[@]}" --work "$W" --index "$WORK_ROOT/index/$DATASET"
"$PY" "$HERE/peer.py" restore --work "$W" --out "$R"

# The model's servers (config.Model.servers, all with the same arguments): the gate sends each generation
# to the one whose last prompt shares the longest prefix with it, one generation at a time.
mapfile -t SERVE_ARGS < <(cfg serve-args "$LM")
LM_PORTS=() LM_URLS=() LM_PIDS=() LM_SERVERS="$(cfg lm-servers "$LM")"
for ((i = 0; i < LM_SERVERS; i++)); do
  LM_PORTS+=("$(free_port)")
  "$PY" -m dsp.serve_lm --host 127.0.0.1 --port "${LM_PORTS[i]}" "${SERVE_ARGS[@]}" > "$W/logs/lm-server$i.log" 2>&1 &
  PIDS+=($!); LM_PIDS+=($!); LM_URLS+=(--lm "http://127.0.0.1:${LM_PORTS[i]}")
done
RM_PORT="$(free_port)"
"$DSP" serve --index "$WORK_ROOT/index/$DATASET" --port "$RM_PORT" --log-level WARNING > "$W/logs/rm-server.log" 2>&1 &
PIDS+=($!); RM_PID=$!
for i in "${!LM_PORTS[@]}"; do
  wait_for "http://127.0.0.1:${LM_PORTS[i]}/v1/models" 600 "LM server $i" "$W/logs/lm-server$i.log" "${LM_PIDS[i]}"
done
wait_for "http://127.0.0.1:$RM_PORT/health" 600 "RM server" "$W/logs/rm-server.log" "$RM_PID"
mapfile -t GATE_ARGS < <(cfg gate-args "$LM" | grep .)
# --replay-dir: DSPy's compiles have the gate keep their LM answers there (dspy_side.py), to resume elsewhere.
"$PY" "$HERE/gate.py" --port "$GATE_PORT" "${LM_URLS[@]}" --rm "http://127.0.0.1:$RM_PORT" \
  --replay-dir "$W/dspy" "${GATE_ARGS[@]}" > "$W/logs/gate.log" 2>&1 &
PIDS+=($!); GATE_PID=$!
wait_for "$GATE/gate/health" 30 "gate" "$W/logs/gate.log" "$GATE_PID"
log "LM $LM on :${LM_PORTS[*]}, RM on :$RM_PORT, gate $GATE ($LM_SPEC)"

# -- the units ------------------------------------------------------------------------------------------
FAILED=()
TIMINGS="$W/timings.tsv"
[[ -f "$TIMINGS" ]] || printf 'date\tunit\tn\tseconds\tstatus\n' > "$TIMINGS"
COMMON=(--dataset "$DATASET" --split "$SPLIT" "${NARG[@]}" --out "$W/dsp")
# Client threads: 2 for a program of one LM call a question (the next request is ready when one ends), 1 for
# the DSP program's 5 self-consistency draws: llama.cpp's server ignores n, so dsp asks for the draws one
# request at a time, and from one thread the 4 after the first reuse the prompt the server has just read
# (measured 2026-12-04, Gemma, the NQ compile: 0.54 s a request with 1 thread, 1.6 s with 2 interleaving).
# --threads T sets every unit's.
threads_for() { if [[ -n "$THREADS" ]]; then echo "$THREADS"; elif [[ "$1" == dsp:small-* || "$1" == dsp:compiled-* ]]; then echo 1; else echo 2; fi; }

dsp_unit() {  # UNIT
  local unit="$1" kind seed stem compiled before after started threads
  threads="$(threads_for "$unit")"
  kind="${unit#dsp:}"; seed="${kind##*-seed}"; kind="${kind%-seed*}"
  case "$kind" in
    vanilla) "$DSP" run vanilla "${COMMON[@]}" --threads "$threads" --lm "$LM_SPEC" --rm "$RM_SPEC" --seed "$seed" ;;
    rtr) "$DSP" run retrieve_then_read "${COMMON[@]}" --threads "$threads" --lm "$LM_SPEC" --rm "$RM_SPEC" --seed "$seed" ;;
    small) "$DSP" run dsp --preset small "${COMMON[@]}" --threads "$threads" --lm "$LM_SPEC" --rm "$RM_SPEC" --seed "$seed" ;;
    compiled)
      stem="$DATASET-dsp-small${COMPILE_TAG}-seed$seed"; compiled="$W/compiled/$stem.json"
      # A fresh work folder takes the committed compiled program and its cost rather than compiling again
      # (the compiled file is kept whole in $R/compiled; dsp run validates it before it runs anything).
      if [[ ! -f "$compiled" && -f "$R/compiled/$stem.json" ]]; then
        cp "$R/compiled/$stem.json" "$compiled"
        [[ -f "$R/dsp-compile${COMPILE_TAG}-seed$seed.cost.json" ]] \
          && cp "$R/dsp-compile${COMPILE_TAG}-seed$seed.cost.json" "$W/compiled/$stem.cost.json"
        log "   $stem: the committed compiled program ($R/compiled/$stem.json), not compiled again"
      fi
      if [[ ! -f "$compiled" ]]; then
        before="$W/compiled/$stem.gate-before.json"; after="$W/compiled/$stem.gate-after.json"
        "$PY" "$HERE/peer.py" stats --gate "$GATE" > "$before"
        started=$SECONDS
        "$DSP" compile dsp --dataset "$DATASET" --preset small "${COMPILE_ARGS[@]}" --seed "$seed" --lm "$LM_SPEC" \
          --rm "$RM_SPEC" --threads "$threads" --out "$compiled" || return 1
        "$PY" "$HERE/peer.py" stats --gate "$GATE" > "$after"
        local previous=()  # a rerun on a warm cache keeps the first run's measurement (peer.py compile_cost)
        [[ -f "$W/compiled/$stem.cost.json" ]] && previous=(--previous "$W/compiled/$stem.cost.json")
        "$PY" "$HERE/peer.py" compile-cost --compiled "$compiled" --before "$before" --after "$after" \
          --wall $((SECONDS - started)) "${previous[@]}" --out "$W/compiled/$stem.cost.json"
      fi
      mkdir -p "$R/compiled"
      cp "$compiled" "$R/compiled/"
      [[ -f "$W/compiled/$stem.cost.json" ]] && cp "$W/compiled/$stem.cost.json" "$R/dsp-compile${COMPILE_TAG}-seed$seed.cost.json"
      [[ $COMPILE_ONLY == 1 ]] && { log "   --compile-only: $compiled (no test question run)"; return 0; }
      # No --rm: the compiled program records none when the default retriever won, and the run takes the task's
      # own index in-process, the index the gate's RM serves (README: same passages; the file's identity says it).
      "$DSP" run dsp --compiled "$compiled" "${COMMON[@]}" --threads "$threads" --lm "$LM_SPEC" ;;
    *) echo "run.sh: unknown unit $unit" >&2; return 2 ;;
  esac
}

dspy_unit() {  # UNIT
  local unit="$1" config seed extra=()
  config="${unit#dspy:}"; seed="${config##*-seed}"; config="${config%-seed*}"
  if [[ "$config" == *-rsmatched-* ]]; then
    local candidates="$RS_CANDIDATES"
    if [[ "$candidates" == auto ]]; then
      # the compiler named by --compile-tag (its costs, not another compiler's)
      compgen -G "$R/dsp-compile${COMPILE_TAG}-seed*.cost.json" > /dev/null \
        || { echo "run.sh: $unit needs the cost of dsp compile${COMPILE_TAG:+ ($COMPILE_TAG)} (run dsp:compiled" \
                  "first) or --rs-candidates N" >&2; return 1; }
      candidates="$("$PY" "$HERE/peer.py" matched --dataset "$DATASET" "$R"/dsp-compile"${COMPILE_TAG}"-seed*.cost.json)"
    fi
    extra=(--rs-candidates "$candidates")
  fi
  # Nothing of the project on DSPy's path: its venv has only DSPy and the harness's stdlib-only config.
  PYTHONPATH="" "$DSPY_VENV/bin/python" "$HERE/dspy_side.py" --data "$W/data.json" --work "$W" --gate "$GATE" \
    --lm "$LM" --config "$config" --seed "$seed" --threads "$(threads_for "$unit")" "${extra[@]}"
}

run_unit() { if [[ "$1" == dsp:* ]]; then dsp_unit "$1"; else dspy_unit "$1"; fi; }

# What the terminal is spared (the unit's log keeps it): progress-bar redraws, DSPy's truncation warnings.
QUIET='\| *[0-9]+/[0-9]+ \[|^\s*$|LM response was truncated'
for unit in "${UNITS[@]}"; do
  log "== $unit"
  started=$SECONDS status=ok
  # In the background and waited for, so that an interrupt reaches the trap at once (bash runs a trap only
  # after the foreground command), which stops the unit's process group and the servers.
  run_unit "$unit" > >(tee -a "$W/logs/${unit//:/_}.log" | stdbuf -o0 tr '\r' '\n' \
    | grep --line-buffered -v -E "$QUIET") 2>&1 &
  UNIT_PID=$!
  set +e; wait "$UNIT_PID"; code=$?; set -e
  UNIT_PID=""
  [[ $code == 0 ]] || status=failed
  if [[ "$unit" == dsp:* ]]; then
    "$PY" "$HERE/peer.py" cut --src "$W/dsp/*.jsonl" --out "$R"
  else
    "$PY" "$HERE/peer.py" convert --work "$W" --out "$R" | grep -F -- "-${unit#dspy:}:" || true
  fi
  [[ $status == ok ]] || FAILED+=("$unit")
  printf '%s\t%s\t%s\t%s\t%s\n' "$(date +%FT%T)" "$unit" "${N:-all}" "$((SECONDS - started))" "$status" >> "$TIMINGS"
  log "   $unit: $status, $((SECONDS - started)) s"
done

log "timings of this invocation (all of them in $TIMINGS):"
tail -n "${#UNITS[@]}" "$TIMINGS" | cut -f2,4,5 | column -t
if ! "$PY" "$HERE/peer.py" report --lm "$LM" --dataset "$DATASET" --out "$R" "${NARG[@]}" \
    ${COMPILE_NAME:+--compile-tag "$COMPILE_NAME"}; then
  echo "run.sh: dsp compare could not pair the column's files yet (see above); rerun to finish them" >&2
fi
if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "run.sh: ${#FAILED[@]} unit(s) failed: ${FAILED[*]}; their logs are in $W/logs/. Rerun the same command:" \
       "finished questions are kept." >&2
  exit 1
fi
