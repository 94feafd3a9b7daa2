"""Train the VQ tokenizer (a diffusers ``VQModel``, downsampling 4, codebook 256) on the training split only.

    accelerate launch examples/train_vq_tokenizer.py --preset cpu-quick --output_dir outputs/vqvae

writes the tokenizer (``VQModel.from_pretrained(output_dir)``) and ``vq_reconstruction.json``: per-class
reconstruction MSE and probe accuracy of reconstructions of every class, held-out ones included (the tokenizer's
reconstruction accuracy; not an upper bound for a generator, which decodes token grids it draws itself).
Pass the directory to ``examples/train_maskgit_jepa.py --vqvae_path`` to share one tokenizer between runs.
"""

from __future__ import annotations

import argparse

from compgen.training.script import prepare_run
from compgen.training.tokenizer_first import (
    VQ_PRESETS,
    add_vq_tokenizer_arguments,
    check_vq_tokenizer_arguments,
    train_vq_tokenizer,
)

# The tokenizer flags are the ones examples/train_maskgit_jepa.py uses; here --max_train_steps and --learning_rate
# are the tokenizer's own (there they are the generator's, and --vq_steps / --vq_learning_rate the tokenizer's).
PRESETS = {
    name: {{"vq_steps": "max_train_steps", "vq_learning_rate": "learning_rate"}.get(key, key): value
           for key, value in preset.items()}
    for name, preset in VQ_PRESETS.items()
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_vq_tokenizer_arguments(parser)
    parser.set_defaults(use_ema=False, lr_scheduler="cosine")
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_vq_tokenizer_arguments)
    train_vq_tokenizer(args, run, config.output_dir)


if __name__ == "__main__":
    main()
