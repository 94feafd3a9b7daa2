"""Training task for the KL tokenizer (Paper B's continuous tokenizer, Farid et al. 2025): reconstruction MSE of a
posterior sample plus a small KL term towards N(0, 1), with the VQ tokenizer's training crops."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKL
from torch import nn

from .base import TaskOptions, TrainingTask
from .vq_tokenizer import random_crops

DEFAULT_KL_WEIGHT = 1e-4
"""Weight of the KL term (per latent element, as the reconstruction MSE is per pixel); see :class:`KLTask`."""


class AutoencoderKLForTraining(nn.Module):
    """The trainable module of :class:`KLTask`: encode, sample the posterior with given noise, decode.

    Its ``forward`` runs the whole computation, so that a data-parallel wrapper (``DistributedDataParallel``) sees
    it and synchronises every gradient; the noise comes from the task (the step's generator), so resumes are exact.
    """

    def __init__(self, vae: AutoencoderKL) -> None:
        super().__init__()
        self.vae = vae

    def forward(self, images: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Reconstruction of ``mean + std * noise``, and the posterior's mean and log-variance."""
        posterior = self.vae.encode(images).latent_dist
        latents = posterior.mean + posterior.std * noise.to(posterior.mean.dtype)
        return self.vae.decode(latents).sample, posterior.mean, posterior.logvar


@dataclass(frozen=True)
class KLOptions(TaskOptions):
    """The KL tokenizer task's own options: the KL term's weight and training crops."""

    kl_weight: float = DEFAULT_KL_WEIGHT
    """Weight of the KL term."""
    crop_size: int = 0
    """Train on one random ``crop_size`` crop per image (a multiple of the downsampling); 0: whole images (local crops
    keep the latents local, see ``VQTask``)."""

    def check(self) -> None:
        if not 0 <= self.kl_weight < float("inf"):
            raise ValueError(f"kl_weight must be a finite number >= 0, got {self.kl_weight}")
        if self.crop_size < 0:
            raise ValueError(f"crop_size must be >= 0, got {self.crop_size}")


class KLTask(TrainingTask):
    """Pixel MSE of the reconstruction of a posterior sample, plus ``kl_weight`` x KL(posterior || N(0, 1)).

    Both terms are means (per pixel, per latent element; LDM's 1e-6 weighs sums, about 3e-7 as means here). The
    default ``kl_weight`` 1e-4 keeps the latents near unit scale without pulling channels towards the prior, where
    they stop carrying the image (chosen by reconstruction error and latent spread; evidence:
    ``results/paper-b-tokenizers/NOTES.md``). The DiT standardizes the latents per channel anyway, so their exact
    scale matters less than what each channel carries.

    The posterior noise and the crop positions are drawn from the step's generator (on the CPU, then moved), so a
    resumed run replays the same steps. As for :class:`~compgen.training.tasks.vq_tokenizer.VQTask`, what the
    tokenizer can represent is measured after training by
    :func:`compgen.evaluation.tokenizer_report.reconstruction_report`, so the task has no ``generate``.

    Args:
        vae: The tokenizer to train.
        options: The task's :class:`KLOptions` (or the same as keywords: ``kl_weight=...``).
        tokenizer_options: The training options to record beside the exported tokenizer (``tokenizer_options.json``),
            so that a rerun reuses the tokenizer only when they match.
    """

    Options = KLOptions

    def __init__(self, vae: AutoencoderKL, options: KLOptions | None = None,
                 tokenizer_options: dict[str, Any] | None = None, **option_values: Any) -> None:
        self.options = options if options is not None else self.Options(**option_values)
        self.model = AutoencoderKLForTraining(vae)
        self.tokenizer_options = tokenizer_options
        self.downscale = 2 ** (len(vae.config.block_out_channels) - 1)

    @property
    def vae(self) -> AutoencoderKL:
        """The tokenizer being trained (inside :attr:`model`)."""
        return self.model.vae

    def compute_loss(self, model, batch, generator, step):
        images = batch["images"]
        if self.crop_size:
            images = random_crops(images, self.crop_size, generator)
        batch_size, _, height, width = images.shape
        shape = (batch_size, self.vae.config.latent_channels, height // self.downscale, width // self.downscale)
        noise = torch.randn(shape, generator=generator).to(images.device)
        reconstruction, mean, logvar = model(images, noise)
        reconstruction_loss = F.mse_loss(reconstruction.float(), images.float())
        mean, logvar = mean.float(), logvar.float()
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1.0 - logvar).mean()
        return reconstruction_loss + self.kl_weight * kl, {"reconstruction_mse": reconstruction_loss.detach(),
                                                          "kl": kl.detach()}

    def save_pretrained(self, model, output_dir: Path) -> None:
        model.vae.save_pretrained(output_dir, safe_serialization=True)
        if self.tokenizer_options is not None:
            (Path(output_dir) / "tokenizer_options.json").write_text(json.dumps(self.tokenizer_options, indent=2)
                                                                     + "\n")

    def model_card_details(self) -> dict[str, Any]:
        return {
            "model_name": "AutoencoderKL tokenizer",
            "pipeline_class": "AutoencoderKL",
            "tags": ["autoencoder-kl", "tokenizer"],
            "hyperparameters": {  # the AutoencoderKL's own options follow from its config.json
                "kl_weight": self.kl_weight,
                "tokenizer_data": (self.tokenizer_options or {}).get("tokenizer_data", "not recorded"),
            },
        }
