"""The JEPA auxiliary objective for MaskGIT (Paper B: Farid et al. 2025, "What Drives Compositional Generalization").

The *context* branch is the MaskGIT transformer on the masked tokens. The *target* branch is an EMA copy of the
same transformer fed the full, unmasked tokens with the same conditioning, under stop-gradient
(:class:`compgen.training.ema.ExponentialMovingAverage`). A lightweight predictor per chosen layer ``l`` maps the
context hidden states at ``l`` to the target's hidden states at ``l``; the loss is their MSE on the masked
positions, averaged over layers, added to the MaskGIT cross-entropy with weight lambda (0.6 in the paper).

Choices the paper leaves open, documented here:
- Targets are layer-normalized (no affine) before the MSE, as in I-JEPA: it fixes their scale, so the loss
  cannot shrink merely because the EMA encoder's activations shrink (``normalize=False`` for raw targets).
- The predictor's last layer starts at zero (:class:`JEPAPredictor`, ``zero_init``).
- Layer ``l`` means the output of block ``l`` (1-based); ``hidden_states[0]`` are the embeddings.
- Paper B's best layers {7, 9, 11} of 12 are mapped to other depths by :func:`scale_jepa_layers`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

PAPER_JEPA_LAYERS = (7, 9, 11)
PAPER_DEPTH = 12


def scale_jepa_layers(num_layers: int, layers: Sequence[int] = PAPER_JEPA_LAYERS,
                      reference_depth: int = PAPER_DEPTH) -> tuple[int, ...]:
    """Map Paper B's layers of a ``reference_depth`` model to the same relative depths of a ``num_layers`` model.

    ``round(l * num_layers / reference_depth)`` clamped to ``1..num_layers``, duplicates dropped:
    {7, 9, 11} of 12 stays {7, 9, 11}; of 7 it becomes {4, 5, 6}; of 4, {2, 3, 4}.
    """
    if num_layers < 1:
        raise ValueError(f"num_layers must be at least 1, got {num_layers}")
    scaled = (min(max(round(layer * num_layers / reference_depth), 1), num_layers) for layer in layers)
    return tuple(sorted(set(scaled)))


def parse_jepa_layers(text: str | None, num_layers: int) -> tuple[int, ...]:
    """``--jepa_layers``: ``"7,9,11"`` as given (validated), or ``None`` / ``"auto"`` for the scaled paper layers."""
    if text is None or str(text).strip().lower() in ("", "auto"):
        return scale_jepa_layers(num_layers)
    layers = tuple(sorted({int(part) for part in str(text).split(",") if part.strip()}))
    if not layers or layers[0] < 1 or layers[-1] > num_layers:
        raise ValueError(f"--jepa_layers {text!r}: layers must lie in 1..{num_layers} (the transformer's depth)")
    return layers


class JEPAPredictor(nn.Module):
    """One small MLP per JEPA layer (LayerNorm, Linear, GELU, Linear) from context to target hidden states.

    The last linear layer starts at zero (``zero_init``, compgen's default), so the predictor starts by predicting 0
    (the mean of a normalized target) instead of passing noise back into the transformer; then the JEPA term sends
    no gradient into the transformer until the predictor has learned. ``zero_init=False`` keeps PyTorch's default
    initialisation (Paper B does not say which it used).
    """

    def __init__(self, hidden_size: int, layers: Sequence[int], predictor_hidden_size: int | None = None,
                 zero_init: bool = True) -> None:
        super().__init__()
        if not layers:
            raise ValueError("the JEPA predictor needs at least one layer")
        width = predictor_hidden_size or hidden_size
        self.layers = tuple(int(layer) for layer in layers)
        self.heads = nn.ModuleDict()
        for layer in self.layers:
            head = nn.Sequential(nn.LayerNorm(hidden_size), nn.Linear(hidden_size, width), nn.GELU(),
                                 nn.Linear(width, hidden_size))
            if zero_init:
                nn.init.zeros_(head[-1].weight)
                nn.init.zeros_(head[-1].bias)
            self.heads[str(layer)] = head

    def forward(self, hidden_states: Sequence[torch.Tensor]) -> dict[int, torch.Tensor]:
        """Predictions ``{layer: (B, L, hidden)}`` from the context branch's ``hidden_states`` tuple."""
        return {layer: self.heads[str(layer)](hidden_states[layer]) for layer in self.layers}


def jepa_loss(
    predictions: dict[int, torch.Tensor], target_hidden_states: Sequence[torch.Tensor], mask: torch.BoolTensor,
    normalize: bool = True,
) -> torch.Tensor:
    """Mean over layers of the MSE between predictions and (layer-normalized) targets on the masked positions
    (:func:`jepa_layer_losses`, averaged)."""
    return jepa_layer_losses(predictions, target_hidden_states, mask, normalize).mean()


def jepa_layer_losses(
    predictions: dict[int, torch.Tensor], target_hidden_states: Sequence[torch.Tensor], mask: torch.BoolTensor,
    normalize: bool = True,
) -> torch.Tensor:
    """The MSE between predictions and targets (layer-normalized unless ``normalize`` is false) on the masked
    positions, one per layer of ``predictions`` (in its order): a ``(layers,)`` tensor.

    ``mask`` is ``(B, L)``, ``True`` where the context branch saw a mask token (at least one per batch:
    training masks always mask a token). The targets are detached here (stop-gradient), so the loss never reaches
    the target encoder even if it were left trainable. The masked mean is a weighted sum, not boolean indexing, so
    the loss has no data-dependent shapes (no host synchronisation on a GPU).
    """
    weights = mask.float()
    count = weights.sum().clamp(min=1.0)
    # Every layer at once (one kernel per operation, not one per layer and operation): (layers, B, L, hidden).
    prediction = torch.stack(list(predictions.values())).float()
    target = normalized_targets(target_hidden_states, list(predictions), normalize)
    squared = (prediction - target).pow(2).mean(dim=-1)
    return (squared * weights).sum(dim=(1, 2)) / count


def normalized_targets(target_hidden_states: Sequence[torch.Tensor], layers: Sequence[int], normalize: bool = True
                       ) -> torch.Tensor:
    """The JEPA targets of ``layers``: the target encoder's hidden states, detached and layer-normalized (no affine;
    raw with ``normalize=False``), stacked as ``(layers, B, L, hidden)`` in fp32."""
    target = torch.stack([target_hidden_states[layer] for layer in layers]).detach().float()
    return F.layer_norm(target, target.shape[-1:]) if normalize else target


@torch.no_grad()
def target_spread(targets: torch.Tensor) -> torch.Tensor:
    """The collapse check of the JEPA targets ``(layers, B, L, hidden)``: per layer, the standard deviation of each
    feature over every token of the batch, averaged over features, a ``(layers,)`` tensor. Layer-normalized targets of
    tokens that differ give about 1; a target encoder that maps every token to the same vector (collapse, which the
    normalization alone would hide) gives 0."""
    return targets.flatten(1, 2).std(dim=1).mean(dim=-1)


class MaskGITWithPredictor(nn.Module):
    """The trainable module of MaskGIT + JEPA: the transformer and its JEPA predictor (``None`` for plain MaskGIT),
    so one optimizer, one checkpoint and one EMA cover both.

    Its ``forward`` runs both parts, so that a data-parallel wrapper (``DistributedDataParallel``) sees the whole
    computation and synchronises the gradients of both."""

    def __init__(self, transformer: nn.Module, predictor: JEPAPredictor | None = None) -> None:
        super().__init__()
        self.transformer = transformer
        self.predictor = predictor

    def forward(self, input_ids: torch.Tensor, **conditioning) -> tuple[Any, dict[int, torch.Tensor] | None]:
        """The transformer's output on ``input_ids`` and, with a predictor, its JEPA predictions per layer."""
        output = self.transformer(input_ids, **conditioning, output_hidden_states=self.predictor is not None)
        predictions = self.predictor(output.hidden_states) if self.predictor is not None else None
        return output, predictions
