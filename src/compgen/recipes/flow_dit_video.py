"""Train the diffusion transformer by flow matching over a frame tokenizer's latents on concept-graph clips (Paper B's
continuous video model): the DiT with a time axis, the continuous counterpart of ``maskgit-video``.

    accelerate launch -m compgen.train flow-dit-video --preset cpu-quick --output_dir outputs/flow-dit-video

The flags, the objective and the evaluation sampler are the ``flow-dit`` recipe's; the data a clips config
(``clips-h32-train1``) or a clips export directory. The frame tokenizer (VQ by default, so that the two video
objectives share their tokens; ``--tokenizer kl``) trains first on the frames of the ``tokenizer`` split into
``OUTPUT/tokenizer``; each frame is encoded alone and the transformer denoises the latents of every frame together,
``(C, T, g, g)``. Every evaluation samples clips of every class and scores them with both clip scorers. ``OUTPUT`` then
holds the pipeline (``FlowDiTVideoPipeline.from_pretrained(OUTPUT)``, ``frames`` for ``export_to_gif``), ``README.md``
with per-level accuracy and ``learning_dynamics.jsonl``.
"""

from __future__ import annotations

import argparse

from compgen import TupleConditionedDiT
from compgen.cli import ArgumentParser
from compgen.launch.video_setup import VIDEO_DEFAULTS, check_video_arguments, prepare_video_run
from compgen.recipes import flow_dit, maskgit_video
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.flow_matching import FlowDiTVideoTask

PRESETS = {
    "paper": flow_dit.PRESETS["paper"] | VIDEO_DEFAULTS | dict(eval_images_per_class=50),
    # The same batch, length, evaluations and frame tokenizer as maskgit-video's cpu-quick: the objective differs.
    "cpu-quick": flow_dit.PRESETS["cpu-quick"] | {
        name: maskgit_video.PRESETS["cpu-quick"][name]
        for name in ("train_batch_size", "max_train_steps", "eval_steps", "eval_images_per_class", *VIDEO_DEFAULTS)},
}


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    flow_dit.add_arguments(parser)
    args, run = prepare_video_run(parser, PRESETS, argv, check_arguments, TupleConditionedDiT)
    run.train(flow_dit.build_task(args, run, FlowDiTVideoTask))


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """What clips refuse (:func:`~compgen.launch.video_setup.check_video_arguments`), then the image recipe's checks."""
    check_video_arguments(args)
    flow_dit.check_arguments(args, initial)


if __name__ == "__main__":
    main()
