"""Sampling clips of concept classes with a MaskGIT transformer over the space-time tokens of a frame tokenizer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..models.vq_tokenizer import decode_indices
from .concept_inputs import ConceptPrompts, Generators
from .maskgit import MaskGITPipeline
from .video_output import VideoPipelineOutput, check_video_output_type, postprocess_frames


class MaskGITVideoPipeline(MaskGITPipeline):
    r"""Generate clips of concept classes (``"011"``: a shape, a time of day, a turn) by iterative masked-token
    decoding over every frame's tokens at once (Paper B's discrete video model).

    The transformer (``num_frames > 1``) predicts the tokens of all ``T`` frames together, so the decoding loop, the
    scheduler and guidance are :class:`MaskGITPipeline`'s; each frame's token grid is then decoded by the VQ tokenizer
    that tokenized the frames.

    Args:
        vqvae: The frame tokenizer (a VQ tokenizer of single frames).
        transformer: A :class:`MaskGITTransformer` with ``num_frames > 1``.
        scheduler: A :class:`MaskGITScheduler` whose ``mask_token_id`` is the transformer's mask token.
    """

    _samples_clips = True

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_videos_per_prompt: int = 1,
        num_inference_steps: int = 12,
        temperature: float | tuple[float, float] = (2.0, 0.0),
        guidance_scale: float = 1.0,
        generator: Generators = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
        latents: torch.LongTensor | None = None,
        callback_on_step_end: Callable[..., dict[str, Any]] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
    ) -> VideoPipelineOutput | tuple:
        r"""Sample ``num_videos_per_prompt`` clips of each concept class.

        Args:
            concepts: ``"011"``, ``(0, 1, 1)``, ``{"shape": "circle", ...}`` or a list of those.
            num_videos_per_prompt: Clips per class; each class's clips are listed together, in order.
            num_inference_steps, temperature, guidance_scale, generator, concept_values, callback_on_step_end,
            callback_on_step_end_tensor_inputs: As :meth:`MaskGITPipeline.__call__` (a generator list holds one
                generator per clip).
            output_type: ``"pil"`` (a list of lists of frames, for ``diffusers.utils.export_to_gif``), ``"np"``
                (``(B, T, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, T, 3, H, W)``) or ``"latent"`` (the token ids
                ``(B, T, g, g)``, undecoded).
            latents: The starting token ids ``(B, T * g * g)`` or ``(B, T, g, g)``, the mask token where a token is
                to be generated (known frames or regions are kept: prediction, inpainting); ``None``: all masked.
            return_dict: Return a :class:`~compgen.pipelines.video_output.VideoPipelineOutput` rather than a tuple.
        """
        # 1. Check the output type; the sampler checks the rest
        check_video_output_type(output_type)

        # 2. Sample every frame's tokens together: the image pipeline's loop over the space-time tokens
        tokens = super().__call__(
            concepts, num_images_per_prompt=num_videos_per_prompt, num_inference_steps=num_inference_steps,
            temperature=temperature, guidance_scale=guidance_scale, generator=generator, output_type="latent",
            return_dict=False, concept_values=concept_values, latents=latents,
            callback_on_step_end=callback_on_step_end,
            callback_on_step_end_tensor_inputs=callback_on_step_end_tensor_inputs,
        )[0]

        # 3. Decode each frame's grid by the frame tokenizer, then post-process the clips
        if output_type == "latent":
            frames = tokens
        else:
            decoded = decode_indices(self.vqvae, tokens.flatten(0, 1))
            frames = postprocess_frames(decoded, self.transformer.config.num_frames, output_type)

        self.maybe_free_model_hooks()
        if not return_dict:
            return (frames,)
        return VideoPipelineOutput(frames=frames)
