"""Train the VQ tokenizer (a diffusers ``VQModel``, downsampling 4, codebook 256) on the training split only.

    accelerate launch examples/train_vq_tokenizer.py --preset cpu-quick --output_dir outputs/vqvae

writes the tokenizer (``VQModel.from_pretrained(output_dir)``) and ``vq_reconstruction.json``: per-class
reconstruction MSE and probe accuracy of reconstructions of every class, held-out ones included, which is the
ceiling for any generator decoding through this tokenizer. Pass the directory to
``examples/train_maskgit_jepa.py --vqvae_path`` to share one tokenizer between runs.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

import torch
from diffusers import VQModel

from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.training.script import prepare_run
from compgen.training.vq_task import VQTask, reconstruction_report, reconstruction_summary

logger = logging.getLogger(__name__)

PRESETS = {
    "paper": dict(block_out_channels="64,128,128", vq_embed_dim=128, max_train_steps=5000, learning_rate=1e-3),
    "cpu-quick": dict(block_out_channels="16,32,32", vq_embed_dim=16, max_train_steps=400, learning_rate=2e-3,
                      mixed_precision="bf16"),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--block_out_channels", default="32,64,64", help="3 entries = downsampling 4")
    parser.add_argument("--codebook_size", type=int, default=256)
    parser.add_argument("--vq_embed_dim", type=int, default=32)
    parser.set_defaults(use_ema=False)
    args, config, run = prepare_run(parser, PRESETS, argv)
    torch.manual_seed(config.seed)
    vqvae = build_vq_tokenizer(
        sample_size=run.train_data.image_size,
        block_out_channels=tuple(int(c) for c in args.block_out_channels.split(",")),
        num_vq_embeddings=args.codebook_size,
        vq_embed_dim=args.vq_embed_dim,
    )
    run.train(VQTask(vqvae, run.train_data.space), probes=False)
    if run.probes is not None:
        output_dir = Path(config.output_dir)
        trained = VQModel.from_pretrained(output_dir)
        report_path = output_dir / "vq_reconstruction.json"
        report = reconstruction_report(trained, run.graph, run.probes, output_path=report_path)
        logger.info("VQ reconstruction probe accuracy: %s", reconstruction_summary(report))


if __name__ == "__main__":
    main()
