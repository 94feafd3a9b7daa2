"""Sampling clips of concept classes from a :class:`TupleConditionedDiT` trained by flow matching over the space-time
latents of a frame tokenizer (a VQ or a KL tokenizer)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from .concept_inputs import ConceptPrompts, Generators
from .flow_dit import TupleConditionedFlowDiTPipeline
from .latent_decoding import decode_standardized_latents
from .video_output import VideoPipelineOutput, check_video_output_type, postprocess_frames


class FlowDiTVideoPipeline(TupleConditionedFlowDiTPipeline):
    r"""Generate clips of concept classes (``"011"``: a shape, a time of day, a turn) by integrating a flow over every
    frame's latents at once (Paper B's continuous video model).

    The transformer (``num_frames > 1``) predicts the velocity of all ``T`` frames' standardized latents ``(C, T, g,
    g)`` together, so the integration loop, the scheduler and guidance are :class:`TupleConditionedFlowDiTPipeline`'s;
    each frame's latent grid is then de-standardized and decoded by the tokenizer that encoded the frames (a VQ
    tokenizer after snapping to its codebook, ``quantize=True``; a KL tokenizer as it is).

    Args:
        vqvae: The frozen frame tokenizer (a VQ tokenizer of single frames), or ``None`` with ``vae``.
        transformer: A :class:`TupleConditionedDiT` with ``num_frames > 1``.
        scheduler: A flow-matching scheduler (``FlowMatchEulerDiscreteScheduler``).
        vae: The frozen KL frame tokenizer instead of ``vqvae`` (pass ``vqvae=None``); exactly one of the two is given.
    """

    _samples_clips = True

    @torch.no_grad()
    def __call__(
        self,
        concepts: ConceptPrompts,
        num_videos_per_prompt: int = 1,
        num_inference_steps: int | None = 28,
        guidance_scale: float = 1.0,
        generator: Generators = None,
        output_type: str = "pil",
        return_dict: bool = True,
        concept_values: torch.Tensor | None = None,
        latents: torch.Tensor | None = None,
        callback_on_step_end: Callable[..., dict[str, Any]] | None = None,
        callback_on_step_end_tensor_inputs: Sequence[str] = ("latents",),
        quantize: bool = True,
    ) -> VideoPipelineOutput | tuple:
        r"""Sample ``num_videos_per_prompt`` clips of each concept class.

        Args:
            concepts: ``"011"``, ``(0, 1, 1)``, ``{"shape": "circle", ...}`` or a list of those.
            num_videos_per_prompt: Clips per class; each class's clips are listed together, in order.
            num_inference_steps, guidance_scale, generator, concept_values, callback_on_step_end,
            callback_on_step_end_tensor_inputs, quantize: As :meth:`TupleConditionedFlowDiTPipeline.__call__` (a
                generator list holds one generator per clip).
            output_type: ``"pil"`` (a list of lists of frames, for ``diffusers.utils.export_to_gif``), ``"np"``
                (``(B, T, H, W, 3)`` floats in [0, 1]), ``"pt"`` (``(B, T, 3, H, W)``) or ``"latent"`` (the
                standardized latents ``(B, C, T, g, g)``, undecoded).
            latents: The starting noise ``(B, C, T, g, g)`` (``B``: every clip); ``None`` draws it from ``generator``.
            return_dict: Return a :class:`~compgen.pipelines.video_output.VideoPipelineOutput` rather than a tuple.
        """
        # 1. Check the output type; the sampler checks the rest
        check_video_output_type(output_type)

        # 2. Integrate every frame's latents together: the image pipeline's loop over the space-time latents
        latents = super().__call__(
            concepts, num_images_per_prompt=num_videos_per_prompt, num_inference_steps=num_inference_steps,
            guidance_scale=guidance_scale, generator=generator, output_type="latent", return_dict=False,
            concept_values=concept_values, latents=latents, callback_on_step_end=callback_on_step_end,
            callback_on_step_end_tensor_inputs=callback_on_step_end_tensor_inputs, quantize=quantize,
        )[0]

        # 3. Decode each frame's grid by the frame tokenizer (de-standardized, snapped to the codebook for a VQ
        # tokenizer with quantize=True), then post-process the clips
        if output_type == "latent":
            frames = latents
        else:
            num_frames = self.transformer.config.num_frames
            per_frame = latents.transpose(1, 2).flatten(0, 1)  # (B, C, T, g, g) -> (B * T, C, g, g), clip after clip
            decoded = decode_standardized_latents(self.transformer, self.vqvae, self.vae, per_frame, quantize)
            frames = postprocess_frames(decoded, num_frames, output_type)

        self.maybe_free_model_hooks()
        if not return_dict:
            return (frames,)
        return VideoPipelineOutput(frames=frames)
