"""MaskGIT's masking scheduler (Chang et al. 2022): training-time masks and confidence-based iterative decoding.

diffusers' :class:`~diffusers.AmusedScheduler` implements the same decoding rule for cosine and linear schedules;
this scheduler reuses its Gumbel top-k re-masking (``mask_by_random_topk``) and output class, and adds what it
lacks: the ``square`` and ``arccos`` schedules, exact-count training masks (random, block-shaped, or one visible
block with the rest masked, for the JEPA objective) and a public ``num_masked_after`` so a test can check every step
against the schedule. It is not a subclass because ``AmusedScheduler.step`` hard-codes its two schedules.
"""

from __future__ import annotations

import math

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.schedulers.scheduling_amused import AmusedSchedulerOutput, mask_by_random_topk
from diffusers.schedulers.scheduling_utils import SchedulerMixin

MASKING_SCHEDULES = ("cosine", "linear", "square", "arccos")
MASK_TYPES = ("random", "block", "visible_block")
VISIBLE_BLOCK_FRACTION = (0.15, 0.40)
"""The share of the token grid a ``visible_block`` mask leaves visible, drawn uniformly per image: Paper B's JEPA
context is one small visible block with the rest masked (Farid et al. 2025, the JEPA figure; I-JEPA's context)."""


class MaskGITScheduler(SchedulerMixin, ConfigMixin):
    r"""Masking schedule ``gamma(r)`` (fraction of tokens still masked at progress ``r`` in [0, 1]) for MaskGIT.

    Training: :meth:`sample_mask` draws ``r ~ U(0, 1)`` per image and masks exactly ``ceil(gamma(r) * L)`` tokens.
    Sampling: after step ``i`` of ``T`` the ``floor(gamma((i + 1) / T) * L)`` least confident sampled tokens are
    masked again (at least one fewer than before, none after the last step); confidence is the token's log
    probability plus Gumbel noise whose temperature anneals over the steps.

    Args:
        mask_token_id: Index of the mask token in the transformer's vocabulary (the codebook size).
        masking_schedule: ``"cosine"`` (MaskGIT's default), ``"linear"``, ``"square"`` or ``"arccos"``.
    """

    order = 1

    @register_to_config
    def __init__(self, mask_token_id: int, masking_schedule: str = "cosine") -> None:
        if masking_schedule not in MASKING_SCHEDULES:
            raise ValueError(f"masking_schedule must be one of {MASKING_SCHEDULES}, got {masking_schedule!r}")
        if mask_token_id < 0:
            raise ValueError(f"mask_token_id must be non-negative, got {mask_token_id}")
        self.timesteps: torch.Tensor | None = None
        self.temperatures: torch.Tensor | None = None

    def mask_ratio(self, progress: torch.Tensor | float) -> torch.Tensor:
        """``gamma(progress)``: the fraction of tokens masked at ``progress`` in [0, 1] (1 at 0, 0 at 1)."""
        r = torch.as_tensor(progress, dtype=torch.float64).clamp(0.0, 1.0)
        schedule = self.config.masking_schedule
        if schedule == "cosine":
            return torch.cos(r * math.pi / 2)
        if schedule == "linear":
            return 1.0 - r
        if schedule == "square":
            return 1.0 - r**2
        return torch.arccos(r) / (math.pi / 2)

    # --- training ---------------------------------------------------------------------------------------------

    def sample_mask(
        self,
        batch_size: int,
        grid_size: tuple[int, int] | tuple[int, int, int],
        generator: torch.Generator | None = None,
        mask_type: str = "random",
        device: torch.device | str | None = None,
    ) -> torch.BoolTensor:
        """A training mask ``(batch_size, H * W)``: each row masks ``ceil(gamma(r) * H * W)`` tokens, ``r ~ U(0, 1)``.

        ``mask_type="random"`` picks the positions uniformly (MaskGIT); ``"block"`` picks the positions nearest
        to a random centre under a random aspect ratio, a contiguous rectangle-like block (I-JEPA-style targets).
        ``"visible_block"`` is the inverse, Paper B's context: one such block of ``U(VISIBLE_BLOCK_FRACTION)`` of the
        grid stays visible and every other position is masked (the masking schedule is not used).

        A clip's ``grid_size`` is ``(T, H, W)`` (its frames' grids in order, ``(batch_size, T * H * W)``): a block
        then spans time as well, a box around a random space-time centre whose extent in frames is scaled to the
        grid's height (a block a third of the grid high spans about a third of the frames).
        """
        if mask_type not in MASK_TYPES:
            raise ValueError(f"mask_type must be one of {MASK_TYPES}, got {mask_type!r}")
        if len(grid_size) not in (2, 3):
            raise ValueError(f"grid_size must be (H, W) or, for clips, (T, H, W), got {grid_size!r}")
        frames, (height, width) = (grid_size[0] if len(grid_size) == 3 else 1), grid_size[-2:]
        seq_len = frames * height * width
        progress = torch.rand(batch_size, generator=generator, dtype=torch.float64)
        if mask_type == "visible_block":  # the block is what stays visible: at least one token, at least one masked
            low, high = VISIBLE_BLOCK_FRACTION
            visible = torch.round((low + (high - low) * progress) * seq_len).long().clamp(1, seq_len - 1)
            counts = seq_len - visible
        else:
            counts = torch.ceil(self.mask_ratio(progress) * seq_len).long().clamp(1, seq_len)
        noise = torch.rand(batch_size, seq_len, generator=generator)
        if mask_type == "random":
            scores = noise
        else:
            rows = torch.arange(height, dtype=torch.float32).repeat_interleave(width).repeat(frames)
            cols = torch.arange(width, dtype=torch.float32).repeat(height).repeat(frames)
            centre = torch.rand(batch_size, 2, generator=generator) * torch.tensor([height - 1.0, width - 1.0])
            aspect = torch.exp((torch.rand(batch_size, 1, generator=generator) - 0.5) * math.log(3.0))
            distance = torch.maximum((rows - centre[:, :1]).abs() * aspect, (cols - centre[:, 1:]).abs() / aspect)
            if frames > 1:  # the box's extent in time, on the scale of its height
                times = torch.arange(frames, dtype=torch.float32).repeat_interleave(height * width)
                centre_time = torch.rand(batch_size, 1, generator=generator) * (frames - 1.0)
                distance = torch.maximum(distance, (times - centre_time).abs() * (height / frames) * aspect)
            # Noise smaller than the grid spacing only breaks ties between equally distant positions.
            scores = -(distance + 0.1 * noise)
        ranks = scores.argsort(dim=1, descending=True).argsort(dim=1)
        if mask_type == "visible_block":  # the block nearest the centre is kept, the rest masked
            return (ranks >= (seq_len - counts)[:, None]).to(device)
        return (ranks < counts[:, None]).to(device)

    # --- sampling ---------------------------------------------------------------------------------------------

    def set_timesteps(
        self,
        num_inference_steps: int,
        temperature: float | tuple[float, float] | list[float] = (2.0, 0.0),
        device: str | torch.device | None = None,
    ) -> None:
        """``num_inference_steps`` decoding steps (timesteps ``T-1 .. 0``); the Gumbel temperature of the
        re-masking anneals linearly from ``temperature[0]`` to ``temperature[1]`` (a float ``t`` means ``(t, 0)``)."""
        if num_inference_steps < 1:
            raise ValueError(f"num_inference_steps must be at least 1, got {num_inference_steps}")
        start, end = (temperature, 0.0) if isinstance(temperature, int | float) else temperature
        for value in (start, end):
            if not math.isfinite(float(value)) or float(value) < 0:
                raise ValueError(f"temperature must be finite numbers >= 0, got {temperature!r}")
        self.num_inference_steps = num_inference_steps
        self.timesteps = torch.arange(num_inference_steps, device=device).flip(0)
        self.temperatures = torch.linspace(float(start), float(end), num_inference_steps, device=device)

    def num_masked_after(self, step_index: int, seq_len: int, num_masked_before: int | None = None) -> int:
        """Tokens still masked after decoding step ``step_index`` (0-based) of a ``seq_len``-token sequence."""
        if step_index >= self.num_inference_steps - 1:
            return 0
        target = math.floor(seq_len * float(self.mask_ratio((step_index + 1) / self.num_inference_steps)))
        before = seq_len if num_masked_before is None else num_masked_before
        # Unmask at least one token per step, and keep at least one masked until the last step.
        return max(1, min(before - 1, target))

    def step(
        self,
        model_output: torch.Tensor,
        timestep: int | torch.Tensor,
        sample: torch.LongTensor,
        generator: torch.Generator | list[torch.Generator] | None = None,
        return_dict: bool = True,
    ) -> AmusedSchedulerOutput | tuple:
        """Sample every masked token from ``model_output`` logits ``(B, L, K)``, then re-mask the least confident.

        ``sample`` is ``(B, L)`` token ids with ``mask_token_id`` where still unknown; known tokens are kept.
        ``generator``: one for the batch, or a list with one per image (each image then draws what a batch of that
        image alone would draw with its generator).
        Returns ``prev_sample`` (next input) and ``pred_original_sample`` (all tokens filled in).
        """
        if self.timesteps is None:
            raise ValueError("call set_timesteps before step")
        if model_output.ndim != 3 or model_output.shape[:2] != sample.shape:
            raise ValueError(
                f"model_output must be logits (B, L, K) matching sample (B, L) {tuple(sample.shape)}, "
                f"got {tuple(model_output.shape)}"
            )
        step_index = int((self.timesteps == int(timestep)).nonzero()[0, 0])
        unknown = sample == self.config.mask_token_id
        probs = model_output.float().softmax(dim=-1)
        generators = generator if isinstance(generator, list) else None
        if generators is not None and len(generators) != sample.shape[0]:
            raise ValueError(f"generator is a list of {len(generators)} generators for a batch of {sample.shape[0]}")
        if generators is None:
            flat = probs.reshape(-1, probs.shape[-1])
            if generator is not None:
                flat = flat.to(generator.device)
            sampled = torch.multinomial(flat, 1, generator=generator).to(sample.device).view(sample.shape)
        else:  # each image from its own generator, as a call for that image alone would draw it
            sampled = torch.stack([torch.multinomial(row.to(g.device), 1, generator=g).to(sample.device).view(-1)
                                   for row, g in zip(probs, generators, strict=True)])
        pred_original_sample = torch.where(unknown, sampled, sample)

        seq_len = sample.shape[1]
        num_masked = unknown.sum(dim=1)
        if step_index == self.num_inference_steps - 1:
            prev_sample = pred_original_sample
        else:
            # num_masked_after for every row at once: the schedule's target, at least one fewer than before, at
            # least one (the last step unmasks everything).
            target = math.floor(seq_len * float(self.mask_ratio((step_index + 1) / self.num_inference_steps)))
            mask_len = torch.minimum(num_masked - 1, torch.full_like(num_masked, target)).clamp(min=1)[:, None]
            confidence = torch.gather(probs, -1, pred_original_sample[..., None])[..., 0]
            # Known tokens are never re-masked.
            confidence = torch.where(unknown, confidence, torch.finfo(confidence.dtype).max)
            temperature = float(self.temperatures[step_index])
            if generators is None:
                masking = mask_by_random_topk(mask_len, confidence, temperature, generator)
            else:
                masking = torch.cat([mask_by_random_topk(mask_len[i : i + 1], confidence[i : i + 1], temperature, g)
                                     for i, g in enumerate(generators)])
            prev_sample = torch.where(masking, self.config.mask_token_id, pred_original_sample)

        if not return_dict:
            return (prev_sample, pred_original_sample)
        return AmusedSchedulerOutput(prev_sample=prev_sample, pred_original_sample=pred_original_sample)
