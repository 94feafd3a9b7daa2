#!/usr/bin/env bash
# The one prepared GPU check (13 minutes or less on one H100). The device tool runs it in the repository root with $OUT
# as the folder whose files come back:   bash benchmarks/gpu_check.sh [PEER_DIR]
# (PEER_DIR: a checkout of phys-ai/concept_graphs for the benchmark's peers, optional).
# Jobs run one after another in one process at a time (competing processes on one GPU were slower in total), in
# priority order, each under its own time limit so that the whole check ends in time:
#   1. Paper A's reproduction: examples/train_tuple_unet.py --preset paper on the default data (shaded solids near the
#      frame's centre), seed 0 (4 min 48 s on an H100 for 7800 steps on the earlier flat data); then seed 1 with what
#      is left of its budget.
#   2. Speed (speed_jobs, 300 s): the benchmark suite eager, then compiled, then the paper U-Net preset with the
#      fastest settings (docs/performance.md, "What the GPU check should show", says what each should give).
# GPU_CHECK_JOBS=speed runs only the speed jobs (BUDGET_S then defaults to their 300 s).
set -euo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-}
JOBS=${GPU_CHECK_JOBS:-all}
START=$(date +%s)
SPEED_S=300               # seconds kept for the speed jobs
BUDGET=${BUDGET_S:-$([[ $JOBS == speed ]] && echo $SPEED_S || echo $((470 + SPEED_S)))}   # seconds for the whole check
mkdir -p "$OUT"
python -m pip install --quiet -e . 2>&1 | tail -1 || true   # offline: the source tree below serves
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
run() {  # run NAME LIMIT_S COMMAND...: one job, stopped at its limit (what it logged so far still comes back)
    local name=$1 limit=$2; shift 2
    if (( limit < 30 )); then echo "skip $name: ${limit}s left" | tee -a "$OUT/jobs.txt"; return 0; fi
    local t0=$(date +%s) rc=0
    timeout --signal=INT "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
    echo "$name rc=$rc wall_s=$(( $(date +%s) - t0 )) limit_s=$limit" | tee -a "$OUT/jobs.txt"
}
speed_jobs() {  # 2. Speed: each job under its own limit, 300 s in all
    local bench=(python benchmarks/run_benchmarks.py --device cuda --repeats 3 ${PEER:+--peer-dir "$PEER"})
    # The suite without compilation: throughput, share of the roofline (TF32 convolutions), kernels per step, syncs.
    run speed-suite-eager 80 "${bench[@]}" --only unet unet-paper transformer-paper sample \
        --output "$OUT/speed-suite-eager.json"
    # compgen's paper-size steps and its sampler under torch.compile with CUDA graphs (peers are in the eager run).
    run speed-suite-compiled 100 "${bench[@]}" --only unet-paper transformer-paper sample --compile reduce-overhead \
        --skip diffusers official TransformerEncoder '512\)$' '512\), compiled' 'paper layout$' 'L12\)$' \
        'MaskGIT decoding' 'DDIM 50 steps, compgen U-Net \(64, 128\)(, paper layout)?$' \
        'U-Net \(64, 128\), paper layout, compiled' --output "$OUT/speed-suite-compiled.json"
    # channels_last for the paper-layout U-Net step (off in compgen until a GPU shows a gain).
    run speed-channels-last 30 "${bench[@]}" --only unet-paper --channels-last --skip diffusers official '512\)$' \
        --output "$OUT/speed-channels-last.json"
    # The paper U-Net preset (Paper A's exact layout), compiled with CUDA graphs, one evaluation at the end.
    run speed-paper-unet $(( $(left) - 5 )) python examples/train_tuple_unet.py --preset paper --seed 0 \
        --torch_compile reduce-overhead --eval_steps 7800 --output_dir "$OUT/speed-paper-unet"
}

if [[ $JOBS != speed ]]; then
    # 1. Paper A's reproduction on the default data, seed 0, then seed 1 if time is left.
    run paper-unet-seed0 $(( $(left) - 60 - SPEED_S )) python examples/train_tuple_unet.py --preset paper --seed 0 \
        --eval_steps 390 --output_dir "$OUT/paper-unet-seed0"
    run paper-unet-seed1 $(( $(left) - 20 - SPEED_S )) python examples/train_tuple_unet.py --preset paper --seed 1 \
        --eval_steps 390 --output_dir "$OUT/paper-unet-seed1"
fi
speed_jobs
find "$OUT" -name checkpoints -type d -prune -exec rm -rf {} +   # only logs, cards, samples and weights come back
echo "total wall_s=$(( $(date +%s) - START ))" | tee -a "$OUT/jobs.txt"
