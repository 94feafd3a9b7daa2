"""Train a tokenizer on its own: the VQ tokenizer (a diffusers ``VQModel``, downsampling 4, codebook 256) or, with
``--tokenizer kl``, the continuous one (``AutoencoderKL``), on the images ``--tokenizer_data`` names (default
``all-classes``: the dataset's tokenizer split, every class, labels unused; ``training-classes``: the training split).

    accelerate launch -m compgen.train tokenizer --preset cpu-quick --output_dir outputs/vqvae
    accelerate launch -m compgen.train tokenizer --preset cpu-quick --tokenizer kl --output_dir outputs/kl

writes the tokenizer (``VQModel`` / ``AutoencoderKL.from_pretrained(output_dir)``) and ``vq_reconstruction.json``:
per-class reconstruction MSE and accuracy by both scorers of reconstructions of every class, held-out ones included
(the tokenizer's reconstruction accuracy; not an upper bound for a generator, which decodes token grids it draws
itself). Pass the directory to ``--tokenizer_path`` of the ``maskgit`` recipe (VQ) or of the ``tuple-dit``,
``flow-dit``, ``givt`` and ``mar`` recipes (either kind) to share one tokenizer between runs.
"""

from __future__ import annotations

import argparse

from compgen.cli import ArgumentParser
from compgen.launch.run_setup import prepare_run
from compgen.launch.token_model_setup import (
    VQ_PRESETS,
    add_vq_tokenizer_arguments,
    check_vq_tokenizer_arguments,
    train_kl_tokenizer,
    train_vq_tokenizer,
)
from compgen.launch.tokenizer_kind import TOKENIZER_CLASSES, add_tokenizer_kind_arguments, check_tokenizer_kind
from compgen.training.fine_tuning import InitialWeights

# The tokenizer flags are the ones the maskgit recipe uses; here --max_train_steps and --learning_rate
# are the tokenizer's own (there they are the generator's, and --tokenizer_steps / --tokenizer_learning_rate the
# tokenizer's).
PRESETS = {
    name: {{"tokenizer_steps": "max_train_steps", "tokenizer_learning_rate": "learning_rate"}.get(key, key): value
           for key, value in preset.items()}
    for name, preset in VQ_PRESETS.items()
}


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_vq_tokenizer_arguments(parser)
    add_tokenizer_kind_arguments(parser, allow_kl=True)
    parser.set_defaults(use_ema=False, lr_scheduler="cosine")
    # images, or a clips dataset's frames (a frame tokenizer for the video recipes)
    args, config, run = prepare_run(parser, PRESETS, argv, validate=check_arguments, clips=None)
    (train_kl_tokenizer if args.tokenizer == "kl" else train_vq_tokenizer)(args, run, config.output_dir)


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """The tokenizer's flags, either kind, before any work (``--init_from`` a tokenizer of that kind)."""
    check_vq_tokenizer_arguments(args)
    if initial is not None:
        initial.check_model_class(TOKENIZER_CLASSES[args.tokenizer])
    check_tokenizer_kind(args, allow_kl=True)


if __name__ == "__main__":
    main()
