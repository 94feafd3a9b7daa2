"""Training task for GIVT (Tschannen et al. 2024) with MaskGIT's masking: the rung of Paper B's ladder between
MaskGIT's categorical objective and the DiT's diffusion (Farid et al. 2025).

The objective is the negative log-likelihood of the masked tokens' standardized latents under the transformer's
Gaussian mixtures (:meth:`~compgen.models.givt_transformer.GIVTTransformer.masked_nll`), with MaskGIT's training masks
(:meth:`~compgen.schedulers.MaskGITScheduler.sample_mask`). The latents are the DiT's: a frozen VQ tokenizer's before
quantization or a KL tokenizer's posterior means, computed once
(:func:`~compgen.training.tasks.latent_tokenizer.precompute_latents`).
"""

from __future__ import annotations

from typing import Any

from ...models.givt_transformer import GIVTTransformer
from .masked_latent import MaskedLatentTask


class GIVTTask(MaskedLatentTask):
    """Masked-token likelihood of continuous latents; samples decode through the tokenizer (arguments as
    :class:`~compgen.training.tasks.masked_latent.MaskedLatentTask`'s; ``eval_temperature`` scales the mixtures'
    standard deviations)."""

    def compute_loss(self, model, batch, generator, step):
        latents, mask, _, conditioning = self.masked_batch(batch, generator)
        nll = self.model.masked_nll(model(latents, mask, **conditioning), latents, mask)
        return nll, {"nll": nll.detach()}

    def pipeline(self, transformer: GIVTTransformer):
        from ...pipelines.givt import GIVTPipeline

        return GIVTPipeline(transformer=transformer, scheduler=self.scheduler, **self.tokenizer_components())

    def model_card_details(self) -> dict[str, Any]:
        return {
            "model_name": "GIVTTransformer (Gaussian mixtures over tokenizer latents, MaskGIT's masking)",
            "pipeline_class": "GIVTPipeline",
            "tags": ["givt", "masked-generative", self.tokenizer_kind],
            "hyperparameters": {
                "objective": "negative log-likelihood of the masked tokens' latents under a Gaussian mixture (GIVT)",
                "tokenizer": self.tokenizer_description(),
                **self.backbone_hyperparameters(),
                "eval_sampler": f"{self.eval_inference_steps} steps, random reveal order, temperature "
                                f"{self.eval_temperature}",
            },
            "sections": self.tokenizer_sections(),
        }
