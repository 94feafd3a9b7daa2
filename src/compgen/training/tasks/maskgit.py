"""Training task for MaskGIT, optionally with Paper B's JEPA auxiliary objective (``jepa_weight > 0``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from diffusers import VQModel
from safetensors.torch import save_file
from torch import nn

from ...eval_mode import eval_mode
from ...evaluation.tokenizer_report import reconstruction_markdown
from ...images import uint8_to_signed
from ...models.jepa import (
    JEPAPredictor,
    MaskGITWithPredictor,
    jepa_layer_losses,
    normalized_targets,
    scale_jepa_layers,
    target_spread,
)
from ...models.maskgit_transformer import MaskGITTransformer
from ...models.vq_tokenizer import encode_to_indices
from ...pipelines.concept_inputs import check_temperature
from ...schedulers.scheduling_maskgit import MASK_TYPES, MaskGITScheduler
from ..ema import MOMENTUM_SCHEDULES, ExponentialMovingAverage, MomentumSchedule
from .base import TaskOptions, TrainingTask, check_at_least_one, sample_in_batches

JEPA_TARGET_DIR = "jepa_target"
JEPA_PREDICTOR_INITS = ("zero", "default")
"""``--jepa_predictor_init``: the predictor's last layer at zero (compgen's default) or PyTorch's initialisation."""
JEPA_TARGET_INITS = ("copy", "independent")
"""``--jepa_target_init``: the target encoder starts as a copy of the online transformer (I-JEPA; compgen's default)
or as a second transformer initialised on its own (the JEPA script of a Paper B author's public fork)."""
JEPA_LOSS_POSITIONS = ("masked", "all")
"""``--jepa_loss_positions``: the JEPA loss on the masked positions (compgen's default) or on every position."""


def check_jepa_weight(jepa_weight: float, name: str = "jepa_weight") -> None:
    """Raise ``ValueError`` unless the JEPA term's weight (lambda) is a finite number >= 0 (0: plain MaskGIT)."""
    if not jepa_weight >= 0 or jepa_weight == float("inf"):
        raise ValueError(f"{name} must be a finite number >= 0 (0 trains plain MaskGIT), got {jepa_weight}")


def check_cross_entropy_warmup(warmup_steps: int, jepa_weight: float, total_steps: int, delay_steps: int = 0) -> None:
    """Raise ``ValueError`` unless ``delay_steps`` and ``warmup_steps`` are integers >= 0 that fit in the run together
    and, when either is positive, a JEPA term is there to lead (plain MaskGIT with a zero cross-entropy weight would
    learn nothing)."""
    for name, steps in (("cross_entropy_delay_steps", delay_steps), ("cross_entropy_warmup_steps", warmup_steps)):
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {steps!r}")
    if (warmup_steps or delay_steps) and jepa_weight <= 0:
        raise ValueError("cross_entropy_warmup_steps or cross_entropy_delay_steps > 0 needs a JEPA term (jepa_weight "
                         "> 0): plain MaskGIT with a zero cross-entropy weight learns nothing")
    if delay_steps + warmup_steps > total_steps:
        raise ValueError(f"cross_entropy_delay_steps + cross_entropy_warmup_steps ({delay_steps} + {warmup_steps}) "
                         f"is longer than the run ({total_steps} steps)")


@torch.no_grad()
def precompute_tokens(vqvae: VQModel, images: torch.Tensor, batch_size: int = 512) -> torch.LongTensor:
    """VQ indices ``(N, h * w)`` of uint8 images ``(N, H, W, 3)``, on the tokenizer's device: it is frozen, so
    encode once. Clips ``(N, T, H, W, 3)`` give ``(N, T * h * w)``: each frame tokenized alone, frame after frame."""
    if images.ndim == 5:
        return precompute_tokens(vqvae, images.flatten(0, 1), batch_size).unflatten(0, images.shape[:2]).flatten(1)
    with eval_mode(vqvae):
        chunks = [encode_to_indices(vqvae, uint8_to_signed(images[start : start + batch_size]).to(vqvae.device))
                  .flatten(1) for start in range(0, len(images), batch_size)]
    return torch.cat(chunks)


def masked_cross_entropy(logits: torch.Tensor, targets: torch.LongTensor, mask: torch.BoolTensor,
                         label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean cross-entropy over the masked positions of ``(B, L, K)`` logits, without boolean indexing (no
    data-dependent shapes, so no host synchronisation on a GPU)."""
    per_token = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none",
                                label_smoothing=label_smoothing)
    weights = mask.float()
    return (per_token * weights).sum() / weights.sum().clamp(min=1.0)


@dataclass(frozen=True)
class MaskGITOptions(TaskOptions):
    """The MaskGIT task's own options: the JEPA term (Paper B), the training masks and how the evaluation samples."""

    jepa_weight: float = 0.6
    """Lambda, the JEPA term's weight (0: plain MaskGIT, no target encoder and no predictor)."""
    jepa_layers: tuple[int, ...] | None = None
    """The aligned layers (1-based); ``None``: Paper B's {7, 9, 11} of 12 at the model's depth."""
    jepa_momentum: float = 0.996
    jepa_momentum_end: float = 1.0
    jepa_momentum_schedule: str = "linear"
    """The target encoder's EMA momentum, from ``jepa_momentum`` to ``jepa_momentum_end`` over ``total_steps``."""
    jepa_predictor_hidden_size: int | None = None
    jepa_target_norm: bool = True
    """Layer-normalised targets (``False``: raw hidden states)."""
    jepa_predictor_init: str = "zero"
    """The predictor's last layer at zero or at PyTorch's default initialisation (:data:`JEPA_PREDICTOR_INITS`)."""
    jepa_target_init: str = "copy"
    """The target encoder at step 0: a copy of the online transformer or one initialised on its own
    (:data:`JEPA_TARGET_INITS`)."""
    jepa_loss_positions: str = "masked"
    """Where the JEPA loss is taken: the masked positions or every one (:data:`JEPA_LOSS_POSITIONS`)."""
    cross_entropy_delay_steps: int = 0
    """The cross-entropy is off (weight 0) for these first steps: the JEPA term alone trains the transformer."""
    cross_entropy_warmup_steps: int = 0
    """Then the cross-entropy's weight ramps 0 -> 1 over these steps, so that the JEPA term leads (0: no ramp)."""
    total_steps: int = 1
    mask_type: str = "random"
    """``"random"`` (MaskGIT), ``"block"`` or ``"visible_block"`` (Paper B's context) training masks."""
    label_smoothing: float = 0.1
    eval_inference_steps: int = 12
    eval_temperature: float = 2.0
    """The evaluation sampler's Gumbel temperature (annealed to 0)."""
    eval_batch_size: int = 400

    def check(self) -> None:
        check_jepa_weight(self.jepa_weight)
        if self.jepa_predictor_init not in JEPA_PREDICTOR_INITS:
            raise ValueError(f"jepa_predictor_init must be one of {JEPA_PREDICTOR_INITS}, got "
                             f"{self.jepa_predictor_init!r}")
        if self.jepa_target_init not in JEPA_TARGET_INITS:
            raise ValueError(f"jepa_target_init must be one of {JEPA_TARGET_INITS}, got {self.jepa_target_init!r}")
        if self.jepa_loss_positions not in JEPA_LOSS_POSITIONS:
            raise ValueError(f"jepa_loss_positions must be one of {JEPA_LOSS_POSITIONS}, got "
                             f"{self.jepa_loss_positions!r}")
        for name in ("jepa_momentum", "jepa_momentum_end"):
            if not 0.0 <= getattr(self, name) <= 1.0:  # NaN fails too
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.jepa_predictor_hidden_size is not None and self.jepa_predictor_hidden_size < 1:
            raise ValueError(f"jepa_predictor_hidden_size must be at least 1 (or unset), got "
                             f"{self.jepa_predictor_hidden_size}")
        if self.jepa_momentum_schedule not in MOMENTUM_SCHEDULES:
            raise ValueError(f"jepa_momentum_schedule must be one of {MOMENTUM_SCHEDULES}, got "
                             f"{self.jepa_momentum_schedule!r}")
        if self.mask_type not in MASK_TYPES:
            raise ValueError(f"mask_type must be one of {MASK_TYPES}, got {self.mask_type!r}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must be in [0, 1), got {self.label_smoothing}")
        check_cross_entropy_warmup(self.cross_entropy_warmup_steps, self.jepa_weight, self.total_steps,
                                   self.cross_entropy_delay_steps)
        check_at_least_one(eval_inference_steps=self.eval_inference_steps, eval_batch_size=self.eval_batch_size)
        check_temperature(self.eval_temperature, "eval_temperature")


class MaskGITTask(TrainingTask):
    """Cross-entropy on the masked tokens, plus ``jepa_weight`` times the JEPA loss (Paper B).

    The training log (``training_log.jsonl``) gets, beside ``ce`` and ``jepa``, the JEPA loss per layer
    (``jepa_layer_<l>``, averaged over the logging interval) and, measured on the last step of each interval, the
    spread of each layer's targets (``jepa_target_spread_<l>``, the collapse check of
    :func:`~compgen.models.jepa.target_spread`) and the gradient norms of both objectives on the shared blocks and
    their ratio (:meth:`gradient_norms`).

    The JEPA target encoder is an EMA of the transformer (momentum from ``jepa_momentum`` to ``jepa_momentum_end``
    by ``jepa_momentum_schedule`` over ``total_steps``) fed the unmasked tokens with the same conditioning. It is
    held in :meth:`extra_state` (checkpoints hold it; resume is exact) and exported to ``jepa_target/`` beside the
    pipeline. With ``jepa_weight == 0`` there is no target encoder and no predictor: plain MaskGIT.

    Args:
        transformer: The MaskGIT transformer to train.
        vqvae: The frozen tokenizer (for decoding samples and the exported pipeline).
        scheduler: Masking schedule for training masks and decoding.
        train_tokens: ``(N, L)`` VQ indices of the training images, row ``i`` for ``batch["index"] == i``.
        mask_type: ``"random"`` (MaskGIT), ``"block"`` or ``"visible_block"`` (Paper B's context: one visible block,
            the rest masked) training masks, for both objectives; the JEPA loss is on the masked positions.
    """

    Options = MaskGITOptions

    def __init__(
        self,
        transformer: MaskGITTransformer,
        vqvae: VQModel,
        scheduler: MaskGITScheduler,
        train_tokens: torch.LongTensor,
        options: MaskGITOptions | None = None,
        use_full_conditioning: bool | None = None,
        tokenizer_report: dict[str, Any] | None = None,
        **option_values: Any,
    ) -> None:
        """``options``, or the same as keywords (``jepa_weight=...``): the task's :class:`MaskGITOptions`."""
        options = self.options = options if options is not None else self.Options(**option_values)
        if train_tokens.ndim != 2 or train_tokens.shape[1] != transformer.num_tokens:
            raise ValueError(f"train_tokens must be (N, {transformer.num_tokens}), got {tuple(train_tokens.shape)}")
        self.vqvae = vqvae.eval().requires_grad_(False)
        self.scheduler = scheduler
        self.train_tokens = train_tokens.long()
        self.tokenizer_report = tokenizer_report
        self.use_full_conditioning = self.full_conditioning(transformer, use_full_conditioning)
        self.jepa_layers: tuple[int, ...] = ()
        self.target: ExponentialMovingAverage | None = None
        self.momentum_schedule: MomentumSchedule | None = None
        predictor = None
        if options.jepa_weight > 0:
            self.jepa_layers = tuple(options.jepa_layers or scale_jepa_layers(transformer.config.num_layers))
            predictor = JEPAPredictor(transformer.config.hidden_size, self.jepa_layers,
                                      options.jepa_predictor_hidden_size,
                                      zero_init=options.jepa_predictor_init == "zero")
            self.momentum_schedule = MomentumSchedule(options.jepa_momentum, options.jepa_momentum_end,
                                                      options.jepa_momentum_schedule, options.total_steps)
            # An independent target is drawn from the generator's state after the online model and the predictor,
            # which is then given back: everything drawn afterwards is what it is with a copied target.
            source = transformer
            if options.jepa_target_init == "independent":
                with torch.random.fork_rng(devices=[]):
                    source = type(transformer)(**{k: v for k, v in transformer.config.items()
                                                  if not k.startswith("_")})
            self.target = ExponentialMovingAverage(source, self.momentum_schedule)
        self.model = MaskGITWithPredictor(transformer, predictor)

    def compute_loss(self, model, batch, generator, step):
        transformer = self.model.transformer  # for its configuration; ``model`` may be a data-parallel wrapper
        tokens = self.train_tokens[batch["index"]]
        device = tokens.device
        mask = self.scheduler.sample_mask(len(tokens), transformer.token_grid_shape, generator, self.mask_type,
                                          device=device)
        inputs = torch.where(mask, transformer.mask_token_id, tokens)
        conditioning = self.training_conditioning(transformer, batch, generator)
        output, predictions = model(inputs, **conditioning)
        ce = masked_cross_entropy(output.logits, tokens, mask, self.label_smoothing)
        if self.target is None:
            return ce, {"ce": ce.detach()}
        ce_weight = self.cross_entropy_weight(step)
        # The target encoder runs without a gradient graph, only up to the deepest JEPA layer (no output head), and
        # without checking again the conditioning the online forward checked (the tokens are the tokenizer's).
        with torch.no_grad():
            target_hidden = self.target.shadow.hidden_states(tokens, **conditioning, num_layers=max(self.jepa_layers),
                                                             check_values=False)
        positions = torch.ones_like(mask) if self.options.jepa_loss_positions == "all" else mask
        per_layer = jepa_layer_losses(predictions, target_hidden, positions, self.jepa_target_norm)
        jepa = per_layer.mean()
        scalars = {"ce": ce.detach(), "jepa": jepa.detach()}
        if self.cross_entropy_warmup_steps or self.cross_entropy_delay_steps:
            scalars["ce_weight"] = torch.tensor(ce_weight)
        for index, layer in enumerate(self.jepa_layers):
            scalars[f"jepa_layer_{layer}"] = per_layer[index].detach()
        if self.diagnostic_step(step):
            spread = target_spread(normalized_targets(target_hidden, self.jepa_layers, self.jepa_target_norm))
            scalars |= {f"jepa_target_spread_{layer}": spread[i] for i, layer in enumerate(self.jepa_layers)}
            scalars |= self.gradient_norms(ce, self.jepa_weight * jepa)
        return ce_weight * ce + self.jepa_weight * jepa, scalars

    def cross_entropy_weight(self, step: int) -> float:
        """The cross-entropy's weight at ``step``: 0 for ``cross_entropy_delay_steps``, then 0 -> 1 linearly over
        ``cross_entropy_warmup_steps``, then 1, so the JEPA term alone shapes the representation first (Paper B's
        early phase, where its JEPA arm learns no class for about 8x10^3 steps). Adam's step does not shrink with a
        loss's scale, so only a weight of exactly 0 keeps the cross-entropy from leading."""
        step -= self.cross_entropy_delay_steps
        if step < 0:
            return 0.0
        if step >= self.cross_entropy_warmup_steps:
            return 1.0
        return step / self.cross_entropy_warmup_steps

    def gradient_norms(self, ce: torch.Tensor, weighted_jepa: torch.Tensor) -> dict[str, torch.Tensor]:
        """What each objective asks of the transformer blocks both share: the norm of the gradient of the
        cross-entropy (unweighted: ``ce_weight`` is logged beside it) and of lambda times the JEPA loss with respect
        to the blocks' parameters, and their ratio (JEPA over cross-entropy). Measured by two extra backward passes
        that leave ``.grad`` alone, so the training steps are those of a run without the diagnostic."""
        parameters = [p for p in self.model.transformer.blocks.parameters() if p.requires_grad]
        norms = {}
        for name, loss in (("ce", ce), ("jepa", weighted_jepa)):
            grads = torch.autograd.grad(loss, parameters, retain_graph=True, allow_unused=True)
            norms[name] = torch.linalg.vector_norm(
                torch.stack([torch.linalg.vector_norm(g.float()) for g in grads if g is not None]))
        return {"grad_norm_ce": norms["ce"], "grad_norm_jepa": norms["jepa"],
                "grad_norm_ratio": norms["jepa"] / norms["ce"].clamp(min=1e-12)}

    def after_optimizer_step(self, model, step):
        if self.target is None:
            return {}
        return {"jepa_momentum": self.target.update(model.transformer, step)}

    def extra_state(self) -> dict[str, nn.Module]:
        return {} if self.target is None else {"jepa_target": self.target.shadow}

    def schedules_over_length(self) -> list[str]:
        schedule = self.momentum_schedule
        return [f"the JEPA target momentum ({schedule.kind})"] if schedule and schedule.kind == "linear" else []

    def pipeline(self, transformer: MaskGITTransformer):
        from ...pipelines.maskgit import MaskGITPipeline

        return MaskGITPipeline(vqvae=self.vqvae, transformer=transformer, scheduler=self.scheduler)

    def eval_sampling(self) -> dict[str, Any]:
        return {"num_inference_steps": self.eval_inference_steps, "temperature": self.eval_temperature}

    def generate(self, model, concepts, seed):
        return sample_in_batches(self.pipeline(model.transformer), model, concepts, seed, self.eval_batch_size,
                                 **self.eval_sampling())

    def save_pretrained(self, model, output_dir: Path) -> None:
        self.pipeline(model.transformer).save_pretrained(output_dir, safe_serialization=True)
        if self.target is not None:
            target_dir = Path(output_dir) / JEPA_TARGET_DIR
            self.target.shadow.save_pretrained(target_dir, safe_serialization=True)
            predictor_state = {k: v.contiguous() for k, v in model.predictor.state_dict().items()}
            save_file(predictor_state, str(target_dir / "predictor.safetensors"))

    def model_card_details(self) -> dict[str, Any]:
        # the task's options (MaskGITOptions) and the transformer's config.json are listed beside these
        hyper: dict[str, Any] = {
            "objective": f"MaskGIT cross-entropy + {self.jepa_weight} x JEPA" if self.target else "MaskGIT (no JEPA)",
            "conditioning": "as concept tokens",
            "masking_schedule": self.scheduler.config.masking_schedule,
            "eval_sampler": f"{self.eval_inference_steps} steps, Gumbel temperature {self.eval_temperature} -> 0",
        }
        if self.target is not None:
            schedule = self.momentum_schedule
            hyper |= {
                "jepa_layers": list(self.jepa_layers),
                "jepa_targets": "layer-normalized" if self.jepa_target_norm else "raw hidden states",
                "jepa_ema_momentum": f"{schedule.start} -> {schedule.end} ({schedule.kind} over {schedule.total_steps} "
                                     "steps)",
                "jepa_target_encoder": f"{JEPA_TARGET_DIR}/ (MaskGITTransformer.from_pretrained)",
            }
        sections = []
        if self.tokenizer_report is not None:
            sections.append(("Tokenizer reconstruction accuracy", reconstruction_markdown(self.tokenizer_report)))
        return {
            "model_name": "MaskGITTransformer" + (" + JEPA" if self.target is not None else ""),
            "pipeline_class": "MaskGITPipeline",
            "tags": ["maskgit", "vq"] + (["jepa"] if self.target is not None else []),
            "hyperparameters": hyper,
            "sections": sections,
        }
