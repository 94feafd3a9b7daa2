"""Training task for the VQ tokenizer of the token-space generators (Paper B's Shapes2D setting): reconstruction
MSE plus the VQ codebook and commitment losses, with dead-code restarts and training crops."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import VQModel

from ..batches import mix_seed
from .base import TaskOptions, TrainingTask


@dataclass(frozen=True)
class VQOptions(TaskOptions):
    """The VQ tokenizer task's own options: the commitment term, dead-code restarts and training crops."""

    commitment_cost: float = 0.25
    """Weight of the commitment term (beta)."""
    restart_every: int = 25
    """Steps between dead-code restarts; 0 disables them."""
    restart_until: float = 0.8
    """Last fraction of ``total_steps`` at which restarts happen (the codebook then settles)."""
    total_steps: int = 1
    seed: int = 0
    """The run's seed, mixed into the restart draws."""
    crop_size: int = 0
    """Train on one random ``crop_size`` crop per image (a multiple of the downsampling); 0: whole images."""

    def check(self) -> None:
        if not 0 <= self.commitment_cost < float("inf"):
            raise ValueError(f"commitment_cost must be a finite number >= 0, got {self.commitment_cost}")
        if self.restart_every < 0 or not 0 <= self.restart_until <= 1 or self.crop_size < 0:
            raise ValueError(f"restart_every and crop_size must be >= 0 and restart_until in [0, 1], got "
                             f"{self.restart_every}, {self.crop_size} and {self.restart_until}")


class VQTask(TrainingTask):
    """Pixel MSE of the reconstruction plus the VQ codebook / commitment loss (diffusers' ``VectorQuantizer``).

    What the tokenizer can represent is measured after training by
    :func:`compgen.evaluation.tokenizer_report.reconstruction_report` (its reconstruction accuracy per class), not
    by sampling, so the task has no ``generate``.

    Codebook usage: short runs otherwise settle on a small part of the codebook, too few codes to represent held-out
    compositions (evidence: ``results/maskgit-jepa-h32-old-probes/NOTES.md``, section 1). Two remedies, both on by
    default:

    - the standard VQ-VAE loss weighting (codebook term 1, commitment ``commitment_cost``); diffusers' quantizer
      defaults to its ``legacy`` weighting, which moves the codebook 4x slower than the encoder;
    - *dead-code restarts*: every ``restart_every`` steps until ``restart_until`` (a fraction of ``total_steps``),
      codes that no latent of the current batch chose are reset to randomly chosen latents of that batch. The draw
      uses a generator seeded by the step, so a resumed run restarts exactly the same codes.

    Held-out compositions: with ``crop_size`` the tokenizer trains on random crops (positions drawn from the step's
    generator), and :func:`build_vq_tokenizer` leaves out the mid-block attention by default. Both keep the codes
    local: trained on whole images with global context, the encoder learns shortcuts of the training set such as
    "small object, so red" when every small training object is a red circle (same evidence).

    Args:
        vqvae: The tokenizer to train.
        options: The task's :class:`VQOptions` (or the same as keywords: ``commitment_cost=...``).
        tokenizer_options: The training options to record beside the exported tokenizer (``tokenizer_options.json``),
            so that a rerun reuses the tokenizer only when they match.
    """

    Options = VQOptions

    def __init__(self, vqvae: VQModel, options: VQOptions | None = None,
                 tokenizer_options: dict[str, Any] | None = None, **option_values: Any) -> None:
        self.options = options = options if options is not None else self.Options(**option_values)
        self.model = vqvae
        vqvae.quantize.legacy = False
        vqvae.quantize.beta = options.commitment_cost
        self.last_restart_step = int(options.restart_until * options.total_steps)
        self.tokenizer_options = tokenizer_options
        self._images: torch.Tensor | None = None

    def compute_loss(self, model, batch, generator, step):
        images = batch["images"]
        if self.crop_size:
            images = random_crops(images, self.crop_size, generator)
        self._images = images
        output = model(images)
        reconstruction_loss = F.mse_loss(output.sample.float(), images)
        commit_loss = output.commit_loss.float().mean()
        return reconstruction_loss + commit_loss, {"reconstruction_mse": reconstruction_loss.detach(),
                                                  "commit_loss": commit_loss.detach()}

    @torch.no_grad()
    def after_optimizer_step(self, model, step):
        due = self.restart_every and step % self.restart_every == 0 and step <= self.last_restart_step
        if not due or self._images is None:
            return {}
        latents = model.encode(self._images.to(model.dtype)).latents
        return {"codes_restarted": restart_dead_codes(model, latents, mix_seed(self.seed, step))}

    def save_pretrained(self, model, output_dir: Path) -> None:
        model.save_pretrained(output_dir, safe_serialization=True)
        if self.tokenizer_options is not None:
            (Path(output_dir) / "tokenizer_options.json").write_text(json.dumps(self.tokenizer_options, indent=2)
                                                                     + "\n")

    def schedules_over_length(self) -> list[str]:
        return ["the dead-code restarts (until a fraction of the training)"] if self.restart_every else []

    def model_card_details(self) -> dict[str, Any]:
        return {
            "model_name": "VQModel tokenizer",
            "pipeline_class": "VQModel",
            "tags": ["vqvae", "tokenizer"],
            "hyperparameters": {  # the VQModel's own options follow from its config.json
                "tokenizer_data": (self.tokenizer_options or {}).get("tokenizer_data", "not recorded"),
            },
        }


def random_crops(images: torch.Tensor, size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """One random ``size`` x ``size`` crop per image of ``(B, C, H, W)``, positions drawn from ``generator`` (on the
    CPU; the crops stay on the images' device)."""
    height, width = images.shape[-2:]
    if not 0 < size <= min(height, width):
        raise ValueError(f"crop_size must be in 1..{min(height, width)}, got {size}")
    tops = torch.randint(height - size + 1, (len(images),), generator=generator).to(images.device)
    lefts = torch.randint(width - size + 1, (len(images),), generator=generator).to(images.device)
    offsets = torch.arange(size, device=images.device)
    rows = (tops[:, None] + offsets)[:, None, :, None].expand(-1, images.shape[1], size, width)
    picked_rows = images.gather(2, rows)
    columns = (lefts[:, None] + offsets)[:, None, None, :].expand(-1, images.shape[1], size, size)
    return picked_rows.gather(3, columns)


@torch.no_grad()
def restart_dead_codes(vqvae: VQModel, latents: torch.Tensor, seed: int) -> torch.Tensor:
    """Reset the codebook entries that no vector of ``latents`` ``(B, C, h, w)`` quantizes to, to randomly chosen
    latent vectors (drawn with a CPU generator seeded by ``seed``); returns how many were reset (a device scalar).

    Every code draws a candidate and only the dead ones take it, so shapes never depend on the data (no host
    synchronisation on a GPU)."""
    codebook = vqvae.quantize.embedding.weight
    vectors = latents.float().permute(0, 2, 3, 1).reshape(-1, codebook.shape[1])
    nearest = torch.cdist(vectors, codebook.float()).argmin(dim=1)
    used = torch.zeros(codebook.shape[0], dtype=torch.bool, device=codebook.device)
    used[nearest] = True
    generator = torch.Generator().manual_seed(seed)
    picks = torch.randint(len(vectors), (codebook.shape[0],), generator=generator).to(vectors.device)
    codebook.data = torch.where(used[:, None], codebook, vectors[picks].to(codebook.dtype))
    return (~used).sum()
