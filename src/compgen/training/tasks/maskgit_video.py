"""Training task for MaskGIT over a clip's space-time tokens (Paper B's discrete video model), optionally with the JEPA
target, its masks spanning time."""

from __future__ import annotations

from typing import Any

from ...models.maskgit_transformer import MaskGITTransformer
from .maskgit import MaskGITTask


class MaskGITVideoTask(MaskGITTask):
    """:class:`~compgen.training.tasks.maskgit.MaskGITTask` on clips: the objective, the JEPA term and the options are
    the image task's, over the tokens of every frame (``train_tokens`` ``(N, T * h * w)`` from
    :func:`~compgen.training.tasks.maskgit.precompute_tokens` of the clips); training masks are drawn over the
    ``(T, h, w)`` grid (a block mask is a space-time box); evaluation samples clips
    (:class:`~compgen.pipelines.maskgit_video.MaskGITVideoPipeline`), which the loop's clip tracker scores."""

    def pipeline(self, transformer: MaskGITTransformer):
        from ...pipelines.maskgit_video import MaskGITVideoPipeline

        return MaskGITVideoPipeline(vqvae=self.vqvae, transformer=transformer, scheduler=self.scheduler)

    def model_card_details(self) -> dict[str, Any]:
        details = super().model_card_details()
        frames = self.model.transformer.config.num_frames
        details["model_name"] = details["model_name"].replace("MaskGITTransformer", "MaskGITTransformer (video)")
        details["pipeline_class"] = "MaskGITVideoPipeline"
        details["tags"] = [*details["tags"], "video"]
        details["hyperparameters"] |= {"clip": f"{frames} frames, each tokenized alone by the frame tokenizer "
                                               "(space-time tokens, frame after frame)"}
        return details
