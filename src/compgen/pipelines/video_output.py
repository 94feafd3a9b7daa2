"""What the video pipelines share: their output (``frames``, as diffusers' video pipelines return it) and the
post-processing of decoded frames (diffusers' ``VideoProcessor``).

A clip is decoded frame by frame by the image tokenizer (a frame tokenizer): its ``(B * T, 3, H, W)`` frames in
[-1, 1] become ``frames`` of ``output_type`` ``"np"`` (``(B, T, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, T, 3,
H, W)``) or ``"pil"`` (a list of ``B`` lists of ``T`` images, what ``diffusers.utils.export_to_gif`` and
``export_to_video`` take).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import PIL.Image
import torch
from diffusers.utils import BaseOutput
from diffusers.video_processor import VideoProcessor

VIDEO_OUTPUT_TYPES = ("pil", "np", "pt", "latent")


@dataclass
class VideoPipelineOutput(BaseOutput):
    """``frames``: ``B`` clips of ``T`` frames (``np``: ``(B, T, H, W, 3)`` in [0, 1]; ``pt``: ``(B, T, 3, H, W)``;
    ``pil``: a list of lists of images; ``latent``: the undecoded tokens or latents)."""

    frames: torch.Tensor | np.ndarray | list[list[PIL.Image.Image]]


def check_video_output_type(output_type: str) -> None:
    """Refuse an ``output_type`` the video pipelines do not give (before any sampling)."""
    if output_type not in VIDEO_OUTPUT_TYPES:
        raise ValueError(f"output_type must be one of {VIDEO_OUTPUT_TYPES}, got {output_type!r}")


def check_frames(owner: str, transformer, samples_clips: bool, other: str) -> None:
    """Refuse a transformer whose ``num_frames`` is not what ``owner`` (a pipeline or a task) samples: clips for a
    video one, images for an image one; ``other`` names the one that takes it."""
    if (transformer.config.num_frames > 1) != samples_clips:
        raise ValueError(f"{owner} {'samples clips' if samples_clips else 'samples images'} but the transformer has "
                         f"num_frames {transformer.config.num_frames}: use {other} for it")


def postprocess_frames(frames: torch.Tensor, num_frames: int, output_type: str
                       ) -> torch.Tensor | np.ndarray | list[list[PIL.Image.Image]]:
    """Decoded frames ``(B * T, 3, H, W)`` in [-1, 1], clip after clip, as ``output_type`` clips (see the module)."""
    if frames.ndim != 4 or frames.shape[0] % num_frames:
        raise ValueError(f"frames must be (B * {num_frames}, 3, H, W), got {tuple(frames.shape)}")
    clips = frames.float().unflatten(0, (-1, num_frames)).transpose(1, 2)  # (B, 3, T, H, W), diffusers' layout
    return VideoProcessor(do_resize=False).postprocess_video(clips, output_type=output_type)
