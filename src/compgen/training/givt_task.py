"""Training task for GIVT (Tschannen et al. 2024) with MaskGIT's masking: the rung of Paper B's ladder between
MaskGIT's categorical objective and the DiT's diffusion (Farid et al. 2025).

The objective is the negative log-likelihood of the masked tokens' standardized latents under the transformer's
Gaussian mixtures (:meth:`~compgen.models.givt_transformer.GIVTTransformer.masked_nll`), with MaskGIT's training masks
(:meth:`~compgen.schedulers.MaskGITScheduler.sample_mask`). The latents are the DiT's: a frozen VQ tokenizer's before
quantization or a KL tokenizer's posterior means, computed once (:func:`~compgen.training.dit_task.precompute_latents`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import AutoencoderKL, VQModel

from ..eval_mode import eval_mode
from ..images import unit_to_uint8
from ..models.givt_transformer import GIVTTransformer
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .maskgit_task import training_conditioning
from .task import TrainingTask


class GIVTTask(TrainingTask):
    """Masked-token likelihood of continuous latents; samples decode through the tokenizer.

    Args:
        transformer: The GIVT transformer (its config holds the latent statistics).
        tokenizer: The frozen tokenizer, a ``VQModel`` or an ``AutoencoderKL``.
        scheduler: MaskGIT's schedule, for the training masks and the unmasking steps.
        train_latents: ``(N, C, g, g)`` latents of the training images (row ``i`` for ``batch["index"] == i``).
        eval_temperature: Scale of the mixtures' standard deviations when the evaluation samples.
        tokenizer_report: The tokenizer's reconstruction report, for the model card's reconstruction table.
    """

    def __init__(
        self,
        transformer: GIVTTransformer,
        tokenizer: VQModel | AutoencoderKL,
        scheduler: MaskGITScheduler,
        train_latents: torch.Tensor,
        eval_inference_steps: int = 12,
        eval_temperature: float = 1.0,
        eval_batch_size: int = 400,
        use_full_conditioning: bool | None = None,
        tokenizer_report: dict[str, Any] | None = None,
    ) -> None:
        expected = (transformer.config.latent_channels, transformer.config.grid_size, transformer.config.grid_size)
        if train_latents.ndim != 4 or tuple(train_latents.shape[1:]) != expected:
            raise ValueError(f"train_latents must be (N, {', '.join(map(str, expected))}), "
                             f"got {tuple(train_latents.shape)}")
        if eval_inference_steps < 1 or eval_temperature < 0:
            raise ValueError("eval_inference_steps must be at least 1 and eval_temperature at least 0")
        self.model = transformer
        self.tokenizer = tokenizer.eval().requires_grad_(False)
        self.scheduler = scheduler
        self.train_latents = transformer.normalize_latents(train_latents.float())
        self.eval_inference_steps = eval_inference_steps
        self.eval_temperature = eval_temperature
        self.eval_batch_size = eval_batch_size
        self.use_full_conditioning = (
            transformer.config.conditioning == "full" if use_full_conditioning is None else use_full_conditioning
        )
        self.tokenizer_report = tokenizer_report

    def compute_loss(self, model, batch, generator, step):
        transformer = self.model  # for its configuration; ``model`` may be a data-parallel wrapper
        latents = self.train_latents[batch["index"]]
        grid = transformer.config.grid_size
        mask = self.scheduler.sample_mask(len(latents), (grid, grid), generator, "random", device=latents.device)
        conditioning = training_conditioning(transformer, batch, generator, self.use_full_conditioning,
                                             latents.device)
        nll = transformer.masked_nll(model(latents, mask, **conditioning), latents, mask)
        return nll, {"nll": nll.detach()}

    @property
    def tokenizer_kind(self) -> str:
        """``"kl"`` for an ``AutoencoderKL`` tokenizer, ``"vq"`` for a ``VQModel``."""
        return "kl" if isinstance(self.tokenizer, AutoencoderKL) else "vq"

    def pipeline(self, transformer: GIVTTransformer):
        from ..pipelines.givt import GIVTPipeline

        kl = self.tokenizer_kind == "kl"
        return GIVTPipeline(vqvae=None if kl else self.tokenizer, transformer=transformer, scheduler=self.scheduler,
                            vae=self.tokenizer if kl else None)

    @torch.no_grad()
    def generate(self, model, concepts, seed):
        pipe = self.pipeline(self.model)
        pipe.set_progress_bar_config(disable=True)
        generator = torch.Generator().manual_seed(seed)
        with eval_mode(model):
            chunks = [
                pipe(concepts[start : start + self.eval_batch_size], num_inference_steps=self.eval_inference_steps,
                     temperature=self.eval_temperature, generator=generator, output_type="np").images
                for start in range(0, len(concepts), self.eval_batch_size)
            ]
        return unit_to_uint8(np.concatenate(chunks))

    def eval_sampling(self) -> dict[str, Any]:
        return {"num_inference_steps": self.eval_inference_steps, "temperature": self.eval_temperature}

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(self.model).save_pretrained(output_dir, safe_serialization=True)

    def model_card_details(self) -> dict[str, Any]:
        from ..evaluation.tokenizer_report import reconstruction_markdown

        config = self.model.config
        kl = self.tokenizer_kind == "kl"
        sections = []
        if self.tokenizer_report is not None:
            sections.append(("Tokenizer reconstruction accuracy", reconstruction_markdown(self.tokenizer_report)))
        return {
            "model_name": "GIVTTransformer (Gaussian mixtures over tokenizer latents, MaskGIT's masking)",
            "pipeline_class": "GIVTPipeline",
            "tags": ["givt", "masked-generative", self.tokenizer_kind],
            "hyperparameters": {
                "objective": "negative log-likelihood of the masked tokens' latents under a Gaussian mixture (GIVT)",
                "tokenizer": "AutoencoderKL (posterior means)" if kl else "VQModel (latents before quantization)",
                "num_mixtures": config.num_mixtures,
                "hidden_size": config.hidden_size,
                "num_layers": config.num_layers,
                "num_heads": config.num_heads,
                "grid_size": config.grid_size,
                "latent_channels": config.latent_channels,
                "conditioning": f"{config.conditioning}, as concept tokens",
                "concept_dropout": config.concept_dropout,
                "masking_schedule": self.scheduler.config.masking_schedule,
                "eval_sampler": f"{self.eval_inference_steps} steps, random reveal order, temperature "
                                f"{self.eval_temperature}",
            },
            "sections": sections,
        }
