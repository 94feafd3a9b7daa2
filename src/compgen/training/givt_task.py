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

import torch
from diffusers import AutoencoderKL, VQModel

from ..models.givt_transformer import GIVTTransformer
from ..schedulers.scheduling_maskgit import MaskGITScheduler
from .dit_task import LatentTokenizerMixin
from .maskgit_task import training_conditioning
from .task import TrainingTask, sample_in_batches


class GIVTTask(LatentTokenizerMixin, TrainingTask):
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

    def pipeline(self, transformer: GIVTTransformer):
        from ..pipelines.givt import GIVTPipeline

        return GIVTPipeline(transformer=transformer, scheduler=self.scheduler, **self.tokenizer_components())

    def generate(self, model, concepts, seed):
        return sample_in_batches(self.pipeline(self.model), model, concepts, seed, self.eval_batch_size,
                                 num_inference_steps=self.eval_inference_steps, temperature=self.eval_temperature)

    def eval_sampling(self) -> dict[str, Any]:
        return {"num_inference_steps": self.eval_inference_steps, "temperature": self.eval_temperature}

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(self.model).save_pretrained(output_dir, safe_serialization=True)

    def model_card_details(self) -> dict[str, Any]:
        config = self.model.config
        return {
            "model_name": "GIVTTransformer (Gaussian mixtures over tokenizer latents, MaskGIT's masking)",
            "pipeline_class": "GIVTPipeline",
            "tags": ["givt", "masked-generative", self.tokenizer_kind],
            "hyperparameters": {
                "objective": "negative log-likelihood of the masked tokens' latents under a Gaussian mixture (GIVT)",
                "tokenizer": self.tokenizer_description(),
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
            "sections": self.tokenizer_sections(),
        }
