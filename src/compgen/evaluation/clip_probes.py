"""Learned probes for clips (:mod:`compgen.clips`): the clips' first scorer, beside the pixel-and-motion one
(:mod:`compgen.evaluation.clip_scoring`), trained on rendered clips and independent of it.

Appearance concepts (``shape``, ``time_of_day``) are read frame by frame by a small CNN each, their logits averaged
over the frames; the ``turn``, which exists only in time, by a CNN over the clip's frames stacked along the channels,
with two coordinate channels so that it can relate where the object is in each frame. The probes are a diffusers
``ModelMixin`` (``save_pretrained`` / ``from_pretrained``, safetensors).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from torch import nn
from tqdm.auto import tqdm

from ..clips import CLIP_SPACE, ClipConfig, render_clips
from ..eval_mode import eval_mode
from .probes import shipped_cached_or_trained

APPEARANCE = ("shape", "time_of_day")
MOTION = ("turn",)


def _cnn(channels: int, num_classes: int) -> nn.Sequential:
    """A frame classifier that finds a small object anywhere: convolutions, then the largest response (max pool)."""
    return nn.Sequential(
        nn.Conv2d(3, channels, 3, padding=1), nn.SiLU(),
        nn.Conv2d(channels, 2 * channels, 3, padding=1), nn.SiLU(),
        nn.Conv2d(2 * channels, 2 * channels, 3, padding=1), nn.SiLU(),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(2 * channels, num_classes),
    )


class KeypointEncoder(nn.Module):
    """Where the object is in a frame, learned: a convolutional heat map and its spatial soft-argmax, ``(x, y)`` in
    [-1, 1]."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.heat = nn.Sequential(nn.Conv2d(3, channels, 3, padding=1), nn.SiLU(),
                                  nn.Conv2d(channels, channels, 3, padding=1), nn.SiLU(), nn.Conv2d(channels, 1, 1))

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        n, _, h, w = frames.shape
        weights = self.heat(frames).view(n, h * w).softmax(dim=1).view(n, h, w)
        ys = torch.linspace(-1.0, 1.0, h, device=frames.device, dtype=frames.dtype)
        xs = torch.linspace(-1.0, 1.0, w, device=frames.device, dtype=frames.dtype)
        return torch.stack([(weights.sum(dim=1) * xs).sum(dim=1), (weights.sum(dim=2) * ys).sum(dim=1)], dim=1)


class ClipProbes(ModelMixin, ConfigMixin):
    """One probe per concept of the clip space: per-frame CNNs for appearance; for the turn, a learned keypoint per
    frame and a small MLP over the clip's path of keypoints."""

    @register_to_config
    def __init__(self, num_frames: int = 8, image_size: int = 32, channels: int = 8, hidden: int = 64) -> None:
        super().__init__()
        self.appearance = nn.ModuleDict({name: _cnn(channels, len(CLIP_SPACE.variable(name).values))
                                         for name in APPEARANCE})
        self.keypoints = KeypointEncoder(channels)
        self.motion = nn.ModuleDict({name: nn.Sequential(
            nn.Linear(2 * num_frames, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
            nn.Linear(hidden, len(CLIP_SPACE.variable(name).values))) for name in MOTION})

    def _check(self, clips: torch.Tensor) -> None:
        frames, size = self.config.num_frames, self.config.image_size
        if clips.ndim != 5 or tuple(clips.shape[1:]) != (frames, size, size, 3):
            raise ValueError(f"clips must be (N, {frames}, {size}, {size}, 3), got {tuple(clips.shape)}")

    def appearance_logits(self, frames: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits per appearance concept of float frames ``(M, 3, H, W)``."""
        return {name: probe(frames) for name, probe in self.appearance.items()}

    def forward(self, clips: torch.Tensor) -> dict[str, torch.Tensor]:
        """Logits per concept of float clips ``(N, T, H, W, 3)`` in [0, 1]."""
        self._check(clips)
        n, t, h, w, _ = clips.shape
        frames = clips.permute(0, 1, 4, 2, 3).reshape(n * t, 3, h, w)
        logits = {name: value.view(n, t, -1).mean(dim=1) for name, value in self.appearance_logits(frames).items()}
        path = self.keypoints(frames).view(n, t * 2)
        logits |= {name: probe(path) for name, probe in self.motion.items()}
        return {name: logits[name] for name in CLIP_SPACE.names}

    @torch.no_grad()
    def predict(self, clips: np.ndarray | torch.Tensor, batch_size: int = 256) -> np.ndarray:
        """``(N, 3)`` class indices of uint8 clips ``(N, T, H, W, 3)``, in the clip space's variable order."""
        clips = torch.as_tensor(np.asarray(clips))
        if clips.dtype != torch.uint8:
            raise ValueError(f"clips must be uint8, got {clips.dtype}")
        self._check(clips)
        device = next(self.parameters()).device
        out = []
        with eval_mode(self):
            for start in range(0, len(clips), batch_size):
                chunk = clips[start : start + batch_size].to(device).float() / 255.0
                logits = self(chunk)
                out.append(torch.stack([logits[name].argmax(dim=1) for name in CLIP_SPACE.names], dim=1).cpu())
        return torch.cat(out).numpy() if out else np.zeros((0, CLIP_SPACE.num_variables), dtype=np.int64)


def train_clip_probes(num_clips: int = 4000, steps: int = 1200, batch_size: int = 64, seed: int = 0,
                      config: ClipConfig | None = None, progress: bool = True) -> tuple[ClipProbes, dict[str, float]]:
    """Train :class:`ClipProbes` on ``num_clips`` rendered clips of every class (the data's ranges, with pixel noise as
    generated clips show it); returns the probes and their accuracy per concept on 800 fresh validation clips."""
    config = config or ClipConfig()
    torch.manual_seed(seed)
    classes = np.array(CLIP_SPACE.all_classes())
    train = render_clips(classes[np.arange(num_clips) % len(classes)], seed=seed, config=config)
    valid = render_clips(classes[np.arange(800) % len(classes)], seed=seed + 1, config=config)
    probes = ClipProbes(num_frames=config.num_frames, image_size=config.image_size)
    optimizer = torch.optim.AdamW(probes.parameters(), lr=2e-3)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=2e-3, total_steps=steps)
    frames, labels = torch.from_numpy(train.frames), torch.from_numpy(train.concepts)
    # the keypoints learn where the object is from the rendered path, in the soft-argmax's [-1, 1] frame
    size = config.image_size
    where = torch.from_numpy(-1.0 + 2.0 * (train.trajectory - 0.5) / (size - 1)).float()
    generator = torch.Generator().manual_seed(seed)
    for _ in tqdm(range(steps), desc="clip probes", disable=not progress):
        rows = torch.randint(0, len(frames), (batch_size,), generator=generator)
        clips = frames[rows].float() / 255.0
        noise = torch.rand(batch_size, 1, 1, 1, 1, generator=generator) * 0.06
        clips = (clips + noise * torch.randn(clips.shape, generator=generator)).clamp(0.0, 1.0)
        n, t, h, w, _ = clips.shape
        # appearance from one frame of each clip (the same probe reads every frame at test time), the turn from all
        one = clips[torch.arange(n), torch.randint(0, t, (n,), generator=generator)].permute(0, 3, 1, 2)
        logits = probes.appearance_logits(one)
        path = probes.keypoints(clips.permute(0, 1, 4, 2, 3).reshape(n * t, 3, h, w)).view(n, t * 2)
        logits |= {name: probe(path) for name, probe in probes.motion.items()}
        loss = sum(F.cross_entropy(logits[name], labels[rows, j]) for j, name in enumerate(CLIP_SPACE.names))
        loss = loss + 10.0 * F.mse_loss(path, where[rows].view(n, t * 2))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
    predicted = probes.predict(valid.frames)
    accuracy = {name: float((predicted[:, j] == valid.concepts[:, j]).mean())
                for j, name in enumerate(CLIP_SPACE.names)}
    return probes.eval(), accuracy


CLIP_PROBES_VERSION = 1
"""Bumped whenever the recipe of :func:`train_clip_probes` changes what it trains."""


def default_clip_probes_name(seed: int = 0, config: ClipConfig | None = None) -> tuple[str, str]:
    """The directory name and the full key of the default clip probes: the key holds everything the recipe depends on
    (the clip options, the seed, :data:`CLIP_PROBES_VERSION`, the defaults of :func:`train_clip_probes`)."""
    config = config or ClipConfig()
    parameters = inspect.signature(train_clip_probes).parameters.items()
    defaults = {name: parameter.default for name, parameter in parameters
                if parameter.default is not inspect.Parameter.empty and name not in ("progress", "config", "seed")}
    key = json.dumps([dataclasses.asdict(config), seed, CLIP_PROBES_VERSION, defaults], default=list)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"clips-{config.image_size}px-{config.num_frames}f-seed{seed}-{digest}", key


def default_clip_probes(seed: int = 0, config: ClipConfig | None = None,
                        cache_dir: str | os.PathLike | None = None) -> ClipProbes:
    """The default clip probes: shipped with compgen for the builder's clips (32 px, 8 frames), else cached, else
    trained now (a few minutes on one CPU core) and cached
    (:func:`~compgen.evaluation.probes.shipped_cached_or_trained`)."""
    name, key = default_clip_probes_name(seed, config)
    return shipped_cached_or_trained(name, key, lambda: train_clip_probes(seed=seed, config=config), ClipProbes,
                                     cache_dir, f"default clip probes (seed {seed})")


def clip_probes_for(num_frames: int, image_size: int, path: str | os.PathLike | None = None,
                    what: str = "--probes_path") -> ClipProbes:
    """The clip probes that read clips of ``num_frames`` frames at ``image_size`` px: saved ones at ``path``, checked
    before they load (a :class:`ClipProbes` export of that clip shape; ``ValueError`` naming the mismatch, not a
    failure at the first evaluation), else the default ones for that shape (:func:`default_clip_probes`)."""
    if path is None:
        return default_clip_probes(config=ClipConfig(num_frames=num_frames, image_size=image_size))
    config_file = Path(path) / "config.json"
    if not config_file.is_file():
        raise ValueError(f"{what} {path}: no config.json there (save clip probes with ClipProbes.save_pretrained)")
    config = json.loads(config_file.read_text())
    if config.get("_class_name") != ClipProbes.__name__:
        raise ValueError(f"{what} {path} holds {config.get('_class_name')!r}, not ClipProbes: clips are scored by "
                         "clip probes (python -m compgen.evaluation.train_probes trains image probes only)")
    saved = (config.get("num_frames", 8), config.get("image_size", 32))
    if saved != (num_frames, image_size):
        raise ValueError(f"{what} {path} reads clips of {saved[0]} frames at {saved[1]} px, these clips have "
                         f"{num_frames} frames at {image_size} px: give probes of that shape, or none (the default "
                         "ones for that shape are trained and cached)")
    return ClipProbes.from_pretrained(path)
