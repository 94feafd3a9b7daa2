"""What the video recipes (``maskgit-video``, ``flow-dit-video``) share: their clips dataset and defaults, the options
clips refuse, and the check that the data are clips, so that each video recipe is its image recipe's build over clips.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from ..models.space_time_positions import POSITION_EMBEDDING_TYPES, check_position_embedding_type
from ..training.fine_tuning import InitialWeights
from .run_setup import TrainingRun, prepare_run

CLIPS_DATASET = "clips-h32-train1"
"""The video recipes' default data: shape, time of day and a turn that exists only in time (:mod:`compgen.clips`)."""
VIDEO_DEFAULTS: dict[str, Any] = dict(conditioning="quantized")
"""A clips dataset holds no per-clip value of every concept (``full`` needs them). The frame tokenizer trains, as the
image recipes' do, on the frames of the ``tokenizer`` split (every class; ``--tokenizer_data training-classes``: the
training clips' frames)."""


def check_video_arguments(args: argparse.Namespace) -> None:
    """Refuse, before any work, what clips do not allow: an image config as ``--dataset`` and ``full``
    conditioning."""
    from ..data.concept_graph_builder import ConceptGraphShapes

    if args.dataset in ConceptGraphShapes.builder_configs:
        raise ValueError(f"--dataset {args.dataset} is an image config: a video recipe trains on clips (e.g. "
                         f"{CLIPS_DATASET})")
    if args.conditioning == "full":
        raise ValueError("--conditioning full needs per-clip values of every concept, which the clips datasets do not "
                         "hold: use --conditioning quantized")
    try:
        check_position_embedding_type(args.position_embedding, hidden_size=args.hidden_size)
    except ValueError as error:
        raise ValueError(f"--position_embedding {args.position_embedding} with --hidden_size {args.hidden_size}: "
                         f"{error}") from None


def prepare_video_run(parser: argparse.ArgumentParser, presets: dict[str, dict[str, Any]], argv: list[str] | None,
                      check_arguments: Callable[[argparse.Namespace, InitialWeights | None], None],
                      model_class: type) -> tuple[argparse.Namespace, TrainingRun]:
    """:func:`~compgen.launch.run_setup.prepare_run` over clips: the video defaults, the recipe's ``check_arguments``
    (which calls :func:`check_video_arguments`), and an export directory of images refused once loaded."""
    parser.add_argument_group("clips").add_argument(
        "--position_embedding", default="joint", choices=list(POSITION_EMBEDDING_TYPES),
        help="the transformer's positions: a learned vector per space-time position (joint), or a frame's grid "
             "positions shared by every frame plus a learned vector per frame (factorized)")
    parser.set_defaults(**VIDEO_DEFAULTS)
    args, _, run = prepare_run(parser, presets, argv, validate=check_arguments, model_class=model_class,
                               default_dataset=CLIPS_DATASET, clips=True)
    return args, run


def space_time_options(args: argparse.Namespace, run: TrainingRun) -> dict[str, Any]:
    """What a token transformer is built with for the run's data: its frames, and for clips the position embedding
    ``--position_embedding`` chose (a video recipe's flag; images have one kind)."""
    options: dict[str, Any] = dict(num_frames=run.train_data.num_frames)
    if options["num_frames"] > 1:
        options["position_embedding_type"] = args.position_embedding
    return options
