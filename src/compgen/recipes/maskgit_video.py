"""Train MaskGIT over the space-time tokens of a frame tokenizer on concept-graph clips (Paper B's discrete video
model), with the JEPA target by default (its masks span time; ``--jepa_weight 0``: plain MaskGIT).

    accelerate launch -m compgen.train maskgit-video --preset cpu-quick --output_dir outputs/maskgit-video

The data are a clips config (``clips-h32-train1``: shape, time of day and a turn that exists only in time; or a clips
export directory). The flags are the ``maskgit`` recipe's. The frame tokenizer, a VQ tokenizer of single frames,
trains first on the frames of the clips' ``tokenizer`` split (every class, labels unused) into ``OUTPUT/tokenizer``;
each frame is tokenized alone and the transformer predicts every frame's tokens together. Every evaluation samples
clips of every class and scores them with both clip scorers (``compgen.evaluation.clip_evaluation``). ``OUTPUT`` then
holds the pipeline (``MaskGITVideoPipeline.from_pretrained(OUTPUT)``, whose ``frames`` go to
``diffusers.utils.export_to_gif``), ``README.md`` with per-level accuracy and ``learning_dynamics.jsonl``.
"""

from __future__ import annotations

import argparse

from compgen import MaskGITTransformer
from compgen.cli import ArgumentParser
from compgen.launch.video_setup import VIDEO_DEFAULTS, check_video_arguments, prepare_video_run
from compgen.recipes import maskgit
from compgen.training.fine_tuning import InitialWeights
from compgen.training.tasks.maskgit_video import MaskGITVideoTask

PRESETS = {
    # Paper B's transformer over 8 frames of 8x8 tokens (515 positions with the concept tokens).
    "paper": maskgit.PRESETS["paper"] | VIDEO_DEFAULTS | dict(eval_images_per_class=50),
    # cpu-quick's model over 8 frames of 8x8 tokens (a frame tokenizer that downsamples 8 does not reconstruct the
    # clips). A batch of 16 clips is 8192 tokens, 2.5 times an image batch of 64; about 1.7 s a step on one CPU core.
    "cpu-quick": maskgit.PRESETS["cpu-quick"] | VIDEO_DEFAULTS | dict(train_batch_size=16, max_train_steps=1500,
                                                                      eval_steps=250, eval_images_per_class=20),
}


def main(argv: list[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    maskgit.add_arguments(parser)
    args, run = prepare_video_run(parser, PRESETS, argv, check_arguments, MaskGITTransformer)
    run.train(maskgit.build_task(args, run, MaskGITVideoTask))


def check_arguments(args: argparse.Namespace, initial: InitialWeights | None) -> None:
    """What clips refuse (:func:`~compgen.launch.video_setup.check_video_arguments`), then the image recipe's checks."""
    check_video_arguments(args)
    maskgit.check_arguments(args, initial)


if __name__ == "__main__":
    main()
