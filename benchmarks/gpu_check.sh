#!/usr/bin/env bash
# The one prepared GPU check. The device tool runs it in the repository root with $OUT as the folder whose files come
# back:   bash benchmarks/gpu_check.sh [PEER_DIR]
# (PEER_DIR: a checkout of phys-ai/concept_graphs for the benchmark's peers, optional). The device machine has no
# diffusers or datasets: carry their wheels in .whl and the default probes' cache in .gpu-cache, made here with
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 -d .whl diffusers==0.42.1 datasets==5.2.0 dill==0.4.1 \
#       multiprocess==0.70.19 fsspec==2026.9.0 importlib_metadata
#   mkdir -p .gpu-cache && cp -r ~/.cache/compgen .gpu-cache/
# GPU_CHECK_JOBS picks the jobs:
#   paper-b (the default, 8 minutes or less): Paper B's grid, studies/paper_b_grid.yaml as the CPU runs it (33 cells:
#     three seeds of eleven arms, GIVT and MAR included, 2000 steps each), three cells at a time on the one GPU (tiny
#     models: the GPU waits on Python, not on arithmetic), stopped at BUDGET_S with the summary of what finished; the study's summary, logs,
#     cards and samples come back in paper-b-grid.tar.gz.
#   paper-b-ladder (8 minutes or less): Paper B's ladder, studies/paper_b_ladder.yaml (MaskGIT -> GIVT -> MAR -> DiT
#     on one VQ tokenizer, three seeds, 12 cells of 2000 steps), four cells at a time; paper-b-ladder.tar.gz comes back.
#   study (8 minutes or less): any study file, GRID_STUDY=studies/NAME.yaml (e.g. Paper A's findings at Paper A's scale,
#     studies/paper_a_*_gpu.yaml; Paper B's JEPA finding at 8x10^4 steps, studies/paper_b_jepa_gpu.yaml with
#     GRID_PARALLEL=6, first in line while issue "Paper B's JEPA finding" is open; Paper B's video question, the
#     discrete against the continuous video model on three seeds, studies/paper_b_video_gpu.yaml with GRID_PARALLEL=6),
#     GRID_PARALLEL cells at a time
#     (default 1), stopped at BUDGET_S with the summary of what finished; study.tar.gz comes back.
#   tests (two minutes or less): the GPU-only tests (the token transformers' CUDA attention backends and fp8 storage
#     computed in bf16, tests/test_transformer_block.py); carry pytest's wheels in .whl too (pytest, pluggy,
#     iniconfig, packaging).
#   all: the jobs of the Paper A issues (13 minutes or less on one H100), below; speed: their speed jobs only.
#   paper-a-train2 (8 minutes or less): Paper A's preset on H32-train2 (the split whose large triangles come out as
#     hybrids on the CPU, results/paper-a-hybrids/), seed 0 then seed 1 with what is left; with "all" (H32-train1,
#     seeds 0 and 1) it runs Paper A's preset on both splits.
# Jobs run one after another, in priority order, each under its own time limit so that the whole check ends in time:
#   1. Paper A's reproduction: examples/train_tuple_unet.py --preset paper on the default data (shaded solids near the
#      frame's centre), seed 0 (4 min 48 s on an H100 for 7800 steps on the earlier flat data); then seed 1 with what
#      is left of its budget.
#   2. Speed (speed_jobs, 300 s): the benchmark suite eager, then compiled, then the paper U-Net preset with the
#      fastest settings (docs/performance.md, "What the GPU check should show", says what each should give).
# GPU_CHECK_JOBS=speed runs only the speed jobs (BUDGET_S then defaults to their 300 s).
set -euo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-}
JOBS=${GPU_CHECK_JOBS:-paper-b}
START=$(date +%s)
SPEED_S=300               # seconds kept for the speed jobs
case $JOBS in
    speed) DEFAULT_BUDGET=$SPEED_S ;; tests) DEFAULT_BUDGET=120 ;; paper-b|paper-b-ladder|paper-a-train2|study) DEFAULT_BUDGET=450 ;; *) DEFAULT_BUDGET=$((470 + SPEED_S)) ;;
esac
BUDGET=${BUDGET_S:-$DEFAULT_BUDGET}   # seconds for the whole check
mkdir -p "$OUT"
if ! command -v python > /dev/null; then mkdir -p /tmp/bin && ln -sf "$(command -v python3)" /tmp/bin/python; fi
export PATH="/tmp/bin:$PATH"
if compgen -G ".whl/*.whl" > /dev/null; then   # the carried wheels of what the device image lacks
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
[[ -d .gpu-cache ]] && export XDG_CACHE_HOME="$PWD/.gpu-cache"   # the default probes, trained once on the CPU
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
left() { echo $(( BUDGET - ($(date +%s) - START) )); }
run() {  # run NAME LIMIT_S COMMAND...: one job, stopped at its limit (what it logged so far still comes back)
    local name=$1 limit=$2; shift 2
    if (( limit < 30 )); then echo "skip $name: ${limit}s left" | tee -a "$OUT/jobs.txt"; return 0; fi
    local t0=$(date +%s) rc=0
    timeout -k 40 --signal=INT "$limit" "$@" > "$OUT/$name.log" 2>&1 || rc=$?
    echo "$name rc=$rc wall_s=$(( $(date +%s) - t0 )) limit_s=$limit" | tee -a "$OUT/jobs.txt"
}
speed_jobs() {  # 2. Speed: each job under its own limit, 300 s in all
    local bench=(python benchmarks/run_benchmarks.py --device cuda --repeats 3 ${PEER:+--peer_dir "$PEER"})
    # The suite without compilation: throughput, share of the roofline (TF32 convolutions), kernels per step, syncs.
    run speed-suite-eager 80 "${bench[@]}" --only unet unet-paper transformer-paper sample \
        --output "$OUT/speed-suite-eager.json"
    # compgen's paper-size steps and its sampler under torch.compile with CUDA graphs (peers are in the eager run).
    run speed-suite-compiled 100 "${bench[@]}" --only unet-paper transformer-paper sample --compile reduce-overhead \
        --skip diffusers official TransformerEncoder '512\)$' '512\), compiled' 'paper layout$' 'L12\)$' \
        'MaskGIT decoding' 'DDIM 50 steps, compgen U-Net \(64, 128\)(, paper layout)?$' \
        'U-Net \(64, 128\), paper layout, compiled' --output "$OUT/speed-suite-compiled.json"
    # channels_last for the paper-layout U-Net step (off in compgen until a GPU shows a gain).
    run speed-channels-last 30 "${bench[@]}" --only unet-paper --channels_last --skip diffusers official '512\)$' \
        --output "$OUT/speed-channels-last.json"
    # The paper U-Net preset (Paper A's exact layout), compiled with CUDA graphs, one evaluation at the end.
    run speed-paper-unet $(( $(left) - 5 )) python examples/train_tuple_unet.py --preset paper --seed 0 \
        --torch_compile reduce-overhead --eval_steps 7800 --output_dir "$OUT/speed-paper-unet"
}

if [[ $JOBS == paper-b || $JOBS == paper-b-ladder || $JOBS == study ]]; then
    # A study; interrupted at its limit, the runner writes the summary of what finished.
    case $JOBS in
        paper-b) study=studies/paper_b_grid.yaml parallel=3 ;;
        paper-b-ladder) study=studies/paper_b_ladder.yaml parallel=4 ;;
        study) study=${GRID_STUDY:?GPU_CHECK_JOBS=study needs GRID_STUDY=studies/NAME.yaml} parallel=1 ;;
    esac
    # GRID_MODELS="a b" runs those arms only; GRID_PARALLEL cells at a time (16 CPU threads shared among them).
    parallel=${GRID_PARALLEL:-$parallel}
    run "$JOBS" $(( $(left) - 20 )) python examples/run_study.py --study "$study" ${GRID_MODELS:+--models $GRID_MODELS} \
        --output_dir "/tmp/$JOBS" --parallel "$parallel" --threads_per_worker $(( 16 / parallel ))
    tar -czf "$OUT/$JOBS.tar.gz" -C /tmp --exclude checkpoints --exclude '*.safetensors' "$JOBS"
    echo "total wall_s=$(( $(date +%s) - START ))" | tee -a "$OUT/jobs.txt"
    exit 0
fi
if [[ $JOBS == tests ]]; then
    run gpu-tests $(( $(left) - 10 )) python -m pytest -q -p no:cacheprovider tests/test_transformer_block.py -k cuda
    echo "total wall_s=$(( $(date +%s) - START ))" | tee -a "$OUT/jobs.txt"
    exit 0
fi
if [[ $JOBS == paper-a-train2 ]]; then
    for seed in 0 1; do
        run paper-unet-train2-seed$seed $(( $(left) - 10 )) python examples/train_tuple_unet.py --preset paper \
            --dataset okawa-h32-train2 --seed $seed --eval_steps 390 --output_dir "$OUT/paper-unet-train2-seed$seed"
    done
    find "$OUT" -name checkpoints -type d -prune -exec rm -rf {} +
    echo "total wall_s=$(( $(date +%s) - START ))" | tee -a "$OUT/jobs.txt"
    exit 0
fi
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
