"""Paper B's mechanism measures on a MaskGIT transformer: polysemantic attention heads and concept-circuit overlap.

Paper B (Farid et al. 2025, its mechanistic analysis of MaskGIT and MaskGIT + JEPA) reports that with JEPA fewer
attention heads are polysemantic (a per-layer plot over layers 0-11) and the circuits of different concepts overlap
less (the Jaccard index of the most influential neurons per concept). Its exact procedure is not published; these are
compgen's definitions (inferences from those two sentences), all causal, by *concept intervention*: an input is a token
grid with some tokens masked and the concepts of a class; its counterfactual changes the value of one concept variable
(to each of its other values in turn) and nothing else.

- **Head sensitivity** ``S[layer, head, concept]``: the mean over inputs and image tokens of the L2 norm of the change
  of the head's contribution to the residual stream (its attention output through its slice of the output
  projection) under the intervention, divided by the mean norm of that contribution.
- A head **responds** to a concept when its sensitivity is at least ``floor`` and at least ``ratio`` times its largest
  sensitivity; it is **polysemantic** when it responds to two or more concept variables. The threshold-free measure
  beside it: the head's effective number of concepts, ``exp`` of the entropy of its normalized sensitivities (1 to V).
- **Neuron influence** on a concept: the mean absolute change of a neuron's activation (a unit of a block's MLP hidden
  layer, after the GELU) over inputs and image tokens under the intervention. A concept's **circuit** is the top
  ``top_fraction`` of neurons by influence (over all layers, and per layer); the **overlap** of two concepts is the
  Jaccard index of their circuits, averaged over pairs of concept variables.

Inputs: the model's own samples of every class of its concept space (decoded, re-encoded by its tokenizer), each
masked at ``mask_ratio`` by a seeded random mask that the counterfactual shares.

    python -m compgen.analysis.mechanism runs/maskgit runs/maskgit-jepa --labels MaskGIT "MaskGIT + JEPA" \
        --output results/paper-b-jepa/mechanism
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..atomic_io import atomic_write_text
from ..cli import ArgumentParser
from ..models.transformer_block import TransformerBlock

DEFAULT_FLOOR = 0.05
DEFAULT_RATIO = 0.5
DEFAULT_TOP_FRACTION = 0.05


def block_internals(block: TransformerBlock, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pre-norm block (:class:`~compgen.models.transformer_block.TransformerBlock`) computed by hand, in eval
    mode: its output ``(B, L, D)``, each head's contribution to the residual stream ``(B, H, L, D)`` (they sum, with
    the output projection's bias, to the attention output) and the MLP's hidden activations ``(B, L, F)``."""
    attention = block.attn
    batch, length, width = hidden.shape
    heads, head_dim = attention.heads, attention.head_dim
    normed = block.norm1(hidden)
    query, key, value = (projection(normed).view(batch, length, heads, head_dim).transpose(1, 2)
                         for projection in (attention.to_q, attention.to_k, attention.to_v))
    per_head = F.scaled_dot_product_attention(query, key, value)  # (B, H, L, head_dim)
    out_projection = attention.to_out[0]
    contributions = torch.einsum("bhld,ehd->bhle", per_head, out_projection.weight.view(width, heads, head_dim))
    hidden = hidden + contributions.sum(1) + out_projection.bias
    first, last = block.ff.net[0], block.ff.net[2]  # the GELU projection in, the projection out
    neurons = first(block.norm2(hidden))
    return hidden + last(neurons), contributions, neurons


@torch.no_grad()
def transformer_internals(transformer: nn.Module, input_ids: torch.Tensor, concepts: torch.Tensor
                          ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """A :class:`~compgen.models.maskgit_transformer.MaskGITTransformer`'s logits over the image tokens, and per block
    each head's contribution and the MLP activations at the image tokens (:func:`block_internals`)."""
    hidden = transformer.embed(input_ids, concepts)
    image = slice(transformer.num_concepts, None)
    head_outputs, neuron_outputs = [], []
    for block in transformer.blocks:
        hidden, contributions, neurons = block_internals(block, hidden)
        head_outputs.append(contributions[:, :, image].float())
        neuron_outputs.append(neurons[:, image].float())
    return transformer.head(transformer.norm_out(hidden[:, image])), head_outputs, neuron_outputs


@torch.no_grad()
def concept_responses(transformer: nn.Module, input_ids: torch.Tensor, concepts: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """Head sensitivities ``(layers, heads, V)`` and neuron influences ``(layers, F, V)`` of concept interventions on
    the inputs ``input_ids`` ``(B, L)`` with ``concepts`` ``(B, V)`` (the module docstring defines both)."""
    space = transformer.concept_space
    _, heads, neurons = transformer_internals(transformer, input_ids, concepts)
    head_norm = torch.stack([h.norm(dim=-1).mean(dim=(0, 2)) for h in heads])  # (layers, heads)
    sensitivity = torch.zeros(len(heads), heads[0].shape[1], space.num_variables)
    influence = torch.zeros(len(neurons), neurons[0].shape[-1], space.num_variables)
    for index, variable in enumerate(space.variables):
        others = range(1, variable.num_values)
        for shift in others:  # every other value of this variable, in turn
            counterfactual = concepts.clone()
            counterfactual[:, index] = (concepts[:, index] + shift) % variable.num_values
            _, heads_cf, neurons_cf = transformer_internals(transformer, input_ids, counterfactual)
            for layer in range(len(heads)):
                change = (heads_cf[layer] - heads[layer]).norm(dim=-1).mean(dim=(0, 2))
                sensitivity[layer, :, index] += change.cpu() / len(others)
                influence[layer, :, index] += (neurons_cf[layer] - neurons[layer]).abs().mean(dim=(0, 1)).cpu() / len(
                    others)
    return sensitivity / head_norm.cpu().clamp(min=1e-12).unsqueeze(-1), influence


def polysemanticity(sensitivity: torch.Tensor, floor: float = DEFAULT_FLOOR, ratio: float = DEFAULT_RATIO
                    ) -> dict[str, Any]:
    """Per layer: how many heads respond to each number of concepts, the polysemantic heads (two or more), and the
    mean effective number of concepts; from sensitivities ``(layers, heads, V)``."""
    largest = sensitivity.max(dim=-1, keepdim=True).values
    responds = (sensitivity >= floor) & (sensitivity >= ratio * largest)
    counts = responds.sum(dim=-1)  # (layers, heads)
    shares = sensitivity / sensitivity.sum(dim=-1, keepdim=True).clamp(min=1e-12)
    entropy = -(shares * shares.clamp(min=1e-12).log()).sum(dim=-1)
    return {
        "concepts_per_head": counts.tolist(),
        "polysemantic_heads_per_layer": (counts >= 2).sum(dim=-1).tolist(),
        "polysemantic_heads": int((counts >= 2).sum()),
        "silent_heads": int((counts == 0).sum()),
        "heads": int(counts.numel()),
        "effective_concepts_per_layer": [round(float(v), 4) for v in entropy.exp().mean(dim=-1)],
        "effective_concepts": round(float(entropy.exp().mean()), 4),
    }


def circuit_overlap(influence: torch.Tensor, names: Sequence[str], top_fraction: float = DEFAULT_TOP_FRACTION
                    ) -> dict[str, Any]:
    """Jaccard overlap of the concepts' circuits (their top ``top_fraction`` neurons by influence), over all layers and
    per layer, per pair of concept variables and averaged; from influences ``(layers, F, V)``."""
    if not 0 < top_fraction <= 1:
        raise ValueError(f"top_fraction must lie in (0, 1], got {top_fraction}")

    def jaccards(scores: torch.Tensor) -> dict[str, float]:  # scores: (neurons, V)
        k = max(1, math.ceil(top_fraction * scores.shape[0]))
        circuits = [set(scores[:, v].topk(k).indices.tolist()) for v in range(scores.shape[1])]
        return {f"{names[a]}-{names[b]}": len(circuits[a] & circuits[b]) / len(circuits[a] | circuits[b])
                for a, b in itertools.combinations(range(len(names)), 2)}

    def mean(values: dict[str, float]) -> float:
        return round(sum(values.values()) / len(values), 4) if values else float("nan")

    overall = jaccards(influence.flatten(0, 1))
    per_layer = [jaccards(influence[layer]) for layer in range(influence.shape[0])]
    return {"pairs": {k: round(v, 4) for k, v in overall.items()}, "mean": mean(overall),
            "per_layer": [mean(layer) for layer in per_layer], "top_fraction": top_fraction}


@torch.no_grad()
def sampled_inputs(pipeline: Any, num_images_per_class: int, mask_ratio: float, seed: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The mechanism's inputs: ``num_images_per_class`` samples of every class of the pipeline's concept space, encoded
    by its tokenizer, each masked at ``mask_ratio`` (seeded); returns token ids ``(B, L)`` and concepts ``(B, V)``."""
    from ..images import uint8_to_signed
    from ..models.vq_tokenizer import encode_to_indices

    if not 0 <= mask_ratio <= 1:
        raise ValueError(f"mask_ratio must lie in [0, 1], got {mask_ratio}")
    transformer = pipeline.transformer
    space = transformer.concept_space
    classes = [tuple(c) for c in itertools.product(*(range(v.num_values) for v in space.variables))]
    generator = torch.Generator().manual_seed(seed)
    images = pipeline(classes, num_images_per_prompt=num_images_per_class,
                      generator=generator, output_type="np").images
    uint8 = torch.from_numpy((images * 255).round().clip(0, 255).astype("uint8"))
    device = transformer.device
    tokens = encode_to_indices(pipeline.vqvae, uint8_to_signed(uint8).to(device)).flatten(1)
    masked = torch.rand(tokens.shape, generator=generator) < mask_ratio
    tokens = torch.where(masked.to(device), transformer.mask_token_id, tokens)
    concepts = torch.tensor(classes, device=device).repeat_interleave(num_images_per_class, dim=0)
    return tokens, concepts


def measure(pipeline: Any, num_images_per_class: int = 16, mask_ratio: float = 0.5, seed: int = 0,
            floor: float = DEFAULT_FLOOR, ratio: float = DEFAULT_RATIO, top_fraction: float = DEFAULT_TOP_FRACTION
            ) -> dict[str, Any]:
    """Both measures on a MaskGIT pipeline (its transformer, on its own samples): a JSON-ready record."""
    transformer = pipeline.transformer.eval()
    tokens, concepts = sampled_inputs(pipeline, num_images_per_class, mask_ratio, seed)
    sensitivity, influence = concept_responses(transformer, tokens, concepts)
    names = [variable.name for variable in transformer.concept_space.variables]
    return {
        "concepts": names,
        "layers": len(transformer.blocks),
        "heads_per_layer": sensitivity.shape[1],
        "neurons_per_layer": influence.shape[1],
        "inputs": {"num_images_per_class": num_images_per_class, "mask_ratio": mask_ratio, "seed": seed},
        "thresholds": {"floor": floor, "ratio": ratio},
        "head_sensitivity": [[[round(float(s), 5) for s in head] for head in layer] for layer in sensitivity],
        "polysemanticity": polysemanticity(sensitivity, floor, ratio),
        "circuit_overlap": circuit_overlap(influence, names, top_fraction),
    }


def plot_mechanism(records: dict[str, dict[str, Any]], path: Path) -> None:
    """Per layer, polysemantic heads and circuit overlap of each labelled record, side by side."""
    from ..evaluation.figure_style import save_figure, subplots

    fig, (ax_heads, ax_jaccard) = subplots(1, 2, figsize=(10, 3.6))
    for label, record in records.items():
        layers = range(1, record["layers"] + 1)
        ax_heads.plot(layers, record["polysemanticity"]["polysemantic_heads_per_layer"], marker="o", label=label)
        ax_jaccard.plot(layers, record["circuit_overlap"]["per_layer"], marker="o", label=label)
    for ax in (ax_heads, ax_jaccard):
        ax.set_xticks(list(range(1, max(record["layers"] for record in records.values()) + 1)))
    ax_heads.set(xlabel="layer", ylabel="polysemantic heads", title="heads responding to >= 2 concepts")
    ax_jaccard.set(xlabel="layer", ylabel="Jaccard", title="overlap of concept circuits", ylim=(0, 1))
    ax_heads.legend(fontsize=8)
    save_figure(fig, path)


def main(argv: Sequence[str] | None = None) -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pipelines", nargs="+", help="exported MaskGIT pipelines (directories or Hub ids)")
    parser.add_argument("--labels", nargs="+", default=None, help="one name per pipeline (default: the paths)")
    parser.add_argument("--output", required=True, help="directory for mechanism.json and mechanism.png")
    parser.add_argument("--num_images_per_class", type=int, default=16)
    parser.add_argument("--mask_ratio", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--floor", type=float, default=DEFAULT_FLOOR)
    parser.add_argument("--ratio", type=float, default=DEFAULT_RATIO)
    parser.add_argument("--top_fraction", type=float, default=DEFAULT_TOP_FRACTION)
    args = parser.parse_args(argv)
    labels = args.labels or list(args.pipelines)
    if len(labels) != len(args.pipelines):
        parser.error(f"--labels names {len(labels)} pipelines, but {len(args.pipelines)} were given")
    if len(set(labels)) != len(labels):
        parser.error("--labels must be distinct")
    if args.num_images_per_class < 1:
        parser.error("--num_images_per_class must be at least 1")
    if not 0 <= args.mask_ratio <= 1:
        parser.error(f"--mask_ratio must lie in [0, 1], got {args.mask_ratio}")
    if not 0 < args.top_fraction <= 1:
        parser.error(f"--top_fraction must lie in (0, 1], got {args.top_fraction}")
    if not (args.floor >= 0 and 0 <= args.ratio <= 1):
        parser.error("--floor must be non-negative and --ratio lie in [0, 1]")
    output = Path(args.output)
    if output.exists() and not output.is_dir():  # found before the measuring, not after it
        parser.error(f"--output {args.output} is a file: name a directory for mechanism.json and mechanism.png")
    for path in args.pipelines:  # another family's export: a usage error, not a diffusers loader error
        index = Path(path) / "model_index.json"
        kind = json.loads(index.read_text()).get("_class_name") if index.is_file() else None
        if index.is_file() and kind != "MaskGITPipeline":
            parser.error(f"{path} is a {kind} export: the mechanism measures read MaskGIT pipelines (attention "
                         "heads over token grids) only")
    from ..pipelines.maskgit import MaskGITPipeline

    pipelines = {label: MaskGITPipeline.from_pretrained(path)
                 for label, path in zip(labels, args.pipelines, strict=True)}
    records = {}
    for (label, pipeline), path in zip(pipelines.items(), args.pipelines, strict=True):
        pipeline.set_progress_bar_config(disable=True)
        records[label] = measure(pipeline, args.num_images_per_class, args.mask_ratio, args.seed, args.floor,
                                 args.ratio, args.top_fraction) | {"pipeline": str(path)}
        heads, overlap = records[label]["polysemanticity"], records[label]["circuit_overlap"]
        print(f"{label}: polysemantic heads per layer {heads['polysemantic_heads_per_layer']}, circuit overlap "
              f"{overlap['mean']} (per layer {overlap['per_layer']})")
    output.mkdir(parents=True, exist_ok=True)
    atomic_write_text(output / "mechanism.json", json.dumps(records, indent=1) + "\n")
    plot_mechanism(records, output / "mechanism.png")


if __name__ == "__main__":
    main()
