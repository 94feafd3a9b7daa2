"""The probes a training run is evaluated with (:func:`load_probes`): saved ones, the clip probes, CNN probes trained
on the data's probe splits (their quality checked before training), or the default shapes probes."""

from __future__ import annotations

import logging

import torch
from torch import nn

from ..data.loading import ConceptImageData

logger = logging.getLogger(__name__)


def load_probes(
    path: str | None,
    train_data: ConceptImageData,
    seed: int,
    probe_splits: tuple[ConceptImageData, ConceptImageData] | None = None,
    accept_weak: bool = False,
) -> nn.Module:
    """The probes a run is evaluated with.

    Saved probes if ``path`` is given; else CNN probes trained now on ``probe_splits`` = (``probe_train``,
    ``probe_val``) of datasets that have them (CelebA), with the ``probe_val`` accuracy logged, kept on the probes for
    the log and the card (``validation``), and a probe near chance refused unless ``accept_weak``; else the default
    shapes probes (:func:`~compgen.evaluation.probes.default_shapes_probes`, trained once and cached on disk).
    """
    from ..evaluation.probes import ConceptProbes, default_shapes_probes

    if train_data.num_frames > 1:  # clips: the clip probes (per-frame appearance, the path's turn)
        from ..evaluation.clip_probes import clip_probes_for

        return clip_probes_for(train_data.num_frames, train_data.image_size, path)
    if path:
        return ConceptProbes.load_checked(path)
    if probe_splits is not None:
        from ..evaluation.train_probes import check_probe_quality, probe_quality, train_cnn_probes

        probes, accuracy = train_cnn_probes(*probe_splits, seed=seed, progress=True)
        probes.validation = quality = probe_quality(accuracy, train_data.space)
        read = ", ".join(f"{name} {row['accuracy']:.3f} ({row['chance']:.3f})" for name, row in quality.items())
        logger.info("CNN probes trained on %d probe_train images; probe_val accuracy (%d images; chance): %s",
                    len(probe_splits[0]), len(probe_splits[1]), read)
        check_probe_quality(quality, accept_weak)
        return probes
    from ..evaluation.scoring import is_shapes_space

    if not is_shapes_space(train_data.space):
        raise ValueError(
            f"no probes for concept variables {train_data.space.names}: the default probes are trained on what the "
            "shapes renderer draws (shape, color, size[, background] of its values); pass --probes_path or use a "
            "dataset with probe_train/probe_val splits"
        )
    # One instrument for every run: the default probes do not depend on the run's seed, so seeds compare fairly.
    probes = default_shapes_probes(train_data.space, image_size=train_data.image_size,
                                   object_scale=train_data.object_scale)
    check_renderer_data(probes, train_data)
    return probes


RENDERED_DATA_ACCURACY = 0.9
"""Per concept, how well the default probes must read the training images for the data to be taken as the shapes
renderer's (on its own renders they read 0.99 or more): images that only share its variable names read near chance."""


def check_renderer_data(probes: nn.Module, train_data: ConceptImageData, images: int = 256) -> None:
    """Refuse the default shapes probes for data that are not the renderer's: the probes judge by what the renderer
    draws, so they must read the run's own training images (``images`` of them, spread over the split) first."""
    rows = torch.linspace(0, len(train_data) - 1, min(images, len(train_data))).long()
    predicted = probes.predict(train_data.images[rows].cpu().numpy())
    accuracy = (predicted == train_data.concepts[rows].cpu()).float().mean(dim=0)
    weak = {name: round(float(a), 3) for name, a in zip(train_data.space.names, accuracy, strict=True)
            if a < RENDERED_DATA_ACCURACY}
    if weak:
        raise ValueError(
            f"the default shapes probes read these training images at {weak} (below {RENDERED_DATA_ACCURACY} per "
            "concept): they are not the shapes renderer's images; pass --probes_path or give the data "
            "probe_train/probe_val splits to train probes on"
        )
