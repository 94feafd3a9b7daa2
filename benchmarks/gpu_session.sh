#!/usr/bin/env bash
# One short, prepared script for a session that is lent a GPU (the device tool runs it in the repository root, with
# $OUT as the folder whose files come back). It checks that every training script runs on CUDA, measures compgen
# against its peers, and trains the paper presets one after another in one process (never as competing processes).
#   bash benchmarks/gpu_session.sh [PEER_DIR]        (PEER_DIR: a checkout of phys-ai/concept_graphs, optional)
set -euo pipefail
OUT=${OUT:-gpu-out}
PEER=${1:-}
mkdir -p "$OUT"
python -m pip install --quiet -e . 2>&1 | tail -1
nvidia-smi --query-gpu=name,memory.total --format=csv | tee "$OUT/gpu.txt"
TINY="--train_batch_size 16 --max_train_steps 4 --eval_steps 4 --eval_images_per_class 2 --checkpointing_steps 4"
TOKENS="--hidden_size 32 --num_layers 2 --num_heads 2 --vq_block_out_channels 16,16,16 --vq_embed_dim 8 --vq_steps 4"
cat > "$OUT/tiny_runs.txt" <<RUNS
examples/train_tuple_unet.py $TINY --block_out_channels 32,64 --output_dir $OUT/tiny/unet
examples/train_vq_tokenizer.py $TINY --vq_block_out_channels 16,16,16 --vq_embed_dim 8 --output_dir $OUT/tiny/vq
examples/train_maskgit_jepa.py $TINY $TOKENS --output_dir $OUT/tiny/maskgit-jepa
examples/train_dit.py $TINY $TOKENS --output_dir $OUT/tiny/dit
RUNS
python -m compgen.training.runner --runs "$OUT/tiny_runs.txt" --summary "$OUT/tiny_runs.json"
python benchmarks/run_benchmarks.py --device cuda ${PEER:+--peer-dir "$PEER"} --output "$OUT/benchmarks_cuda.json"
cat > "$OUT/paper_runs.txt" <<RUNS
examples/train_tuple_unet.py --preset paper --seed 0 --output_dir $OUT/paper/unet-seed0
examples/train_maskgit_jepa.py --preset paper --max_train_steps 5000 --seed 0 --output_dir $OUT/paper/maskgit-jepa-seed0
RUNS
python -m compgen.training.runner --runs "$OUT/paper_runs.txt" --summary "$OUT/paper_runs.json"
find "$OUT" -name checkpoints -type d -prune -exec rm -rf {} +   # only logs, cards and weights come back
