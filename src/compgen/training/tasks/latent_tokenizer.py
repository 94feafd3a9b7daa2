"""What every task over a frozen tokenizer's continuous latents (the DiT's, GIVT's, MAR's) shares: the latents of the
training images (or clips, frame by frame), computed once (:func:`precompute_latents`), their per-channel statistics,
the options a latent model is built with (:func:`latent_model_options`), and :class:`LatentTokenizerMixin` (the
tokenizer's kind, the pipeline components that hold it, the model card's reconstruction table)."""

from __future__ import annotations

from typing import Any

import torch
from diffusers import AutoencoderKL, VQModel

from ...eval_mode import eval_mode
from ...images import uint8_to_signed
from ...models.kl_tokenizer import encode_kl_latents


@torch.no_grad()
def precompute_latents(tokenizer: VQModel | AutoencoderKL, images: torch.Tensor, batch_size: int = 512
                       ) -> torch.Tensor:
    """The tokenizer's continuous latents ``(N, C, g, g)`` of uint8 images ``(N, H, W, 3)``: a ``VQModel``'s before
    quantization, an ``AutoencoderKL``'s posterior means (deterministic). Of uint8 clips ``(N, T, H, W, 3)``: each frame
    encoded alone (a frame tokenizer), arranged ``(N, C, T, g, g)`` (diffusers' video latent layout)."""
    if images.ndim == 5:
        frames = precompute_latents(tokenizer, images.reshape(-1, *images.shape[2:]), batch_size)
        return frames.unflatten(0, tuple(images.shape[:2])).transpose(1, 2).contiguous()

    def encode(signed: torch.Tensor) -> torch.Tensor:
        if isinstance(tokenizer, AutoencoderKL):
            return encode_kl_latents(tokenizer, signed)
        return tokenizer.encode(signed.to(tokenizer.device)).latents

    with eval_mode(tokenizer):
        chunks = [encode(uint8_to_signed(images[start : start + batch_size]))
                  for start in range(0, len(images), batch_size)]
    return torch.cat(chunks).float()


def latent_statistics(latents: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and standard deviation of ``(N, C, g, g)`` latents (the DiT's standardization); of clip
    latents ``(N, C, T, g, g)``, over every frame."""
    dims = (0, *range(2, latents.ndim))
    mean = latents.mean(dim=dims)
    std = latents.std(dim=dims).clamp(min=1e-6)
    return [round(float(v), 6) for v in mean], [round(float(v), 6) for v in std]


def latent_model_options(tokenizer: VQModel | AutoencoderKL, images: torch.Tensor
                         ) -> tuple[torch.Tensor, dict[str, Any]]:
    """The training images' latents ``(N, C, g, g)`` (clips': ``(N, C, T, g, g)``) and what a latent model (the DiT,
    GIVT) is built with from them: ``latent_channels`` and the per-channel ``latent_mean`` and ``latent_std`` it
    standardizes by."""
    latents = precompute_latents(tokenizer, images)
    mean, std = latent_statistics(latents)
    return latents, {"latent_channels": latents.shape[1], "latent_mean": mean, "latent_std": std}


def standardized_training_latents(transformer, train_latents: torch.Tensor) -> torch.Tensor:
    """The training images' latents ``(N, C, g, g)`` (clips': ``(N, C, T, g, g)``) checked against ``transformer``'s
    ``latent_shape`` and standardized by its latent statistics: what a latent diffusion task (the DiT's DDPM, its flow
    matching) diffuses."""
    expected = tuple(transformer.latent_shape)
    if train_latents.ndim != 1 + len(expected) or tuple(train_latents.shape[1:]) != expected:
        raise ValueError(f"train_latents must be (N, {', '.join(map(str, expected))}), "
                         f"got {tuple(train_latents.shape)}")
    return transformer.normalize_latents(train_latents.float())


class LatentTokenizerMixin:
    """What the tasks over a frozen tokenizer's continuous latents (the DiT's, GIVT's) share: the tokenizer's kind, the
    pipeline components that hold it, and the model card's reconstruction table."""

    tokenizer: VQModel | AutoencoderKL
    tokenizer_report: dict[str, Any] | None

    @property
    def tokenizer_kind(self) -> str:
        """``"kl"`` for an ``AutoencoderKL`` tokenizer, ``"vq"`` for a ``VQModel``."""
        return "kl" if isinstance(self.tokenizer, AutoencoderKL) else "vq"

    def tokenizer_components(self) -> dict[str, VQModel | AutoencoderKL | None]:
        """The pipeline's ``vqvae`` and ``vae`` arguments: the tokenizer in its place, ``None`` in the other."""
        kl = self.tokenizer_kind == "kl"
        return {"vqvae": None if kl else self.tokenizer, "vae": self.tokenizer if kl else None}

    def tokenizer_description(self) -> str:
        return ("AutoencoderKL (posterior means)" if self.tokenizer_kind == "kl"
                else "VQModel (latents before quantization)")

    def dit_card_hyperparameters(self, objective: str) -> dict[str, Any]:
        """The model card's hyperparameters of a DiT over the tokenizer's latents that every objective shares (the
        DiT's own options follow from its config.json)."""
        return {"objective": objective, "tokenizer": self.tokenizer_description(),
                "conditioning": "as concept tokens (time as one more token)",
                "num_train_timesteps": self.scheduler.config.num_train_timesteps}

    def decoding_description(self) -> str:
        return "KL decoding" if self.tokenizer_kind == "kl" else "codebook-snapped decoding"

    def tokenizer_sections(self) -> list[tuple[str, str]]:
        """The model card's tokenizer reconstruction table, when the task has the report."""
        from ...evaluation.tokenizer_report import reconstruction_markdown

        if self.tokenizer_report is None:
            return []
        return [("Tokenizer reconstruction accuracy", reconstruction_markdown(self.tokenizer_report))]
