"""How the tuple-conditioned U-Net's concept gates treat each class: do held-out tuples switch the decoder off?

In Paper A's U-Net (``TupleConditionedUNet2DModel``) the per-variable concept embeddings are summed into one vector
``e(c)`` per class that scales the decoder features of every stage (``h * e + t``, or ``h * (1 + e) + t`` with
``concept_modulation="film"``, or ``"scale_shift"``, whose concept shift joins ``t``). A held-out class's ``e(c)`` is
a sum the model never saw; if it points where the training sums never pointed, or shrinks, it can scale the features
toward zero and the denoiser draws an empty frame.

    python -m compgen.analysis.gate_diagnostics MODEL_DIR [--noise_step 250] [--markdown FILE]

prints, per class and decoder stage: the gate's RMS, the cosine similarity to the nearest training class's gate, the
fraction of channels whose gate is near zero (|gate| < 0.05, or |1 + gate| < 0.05 for ``film`` and ``scale_shift``),
and the RMS of the modulated decoder features on noisy real images of that class (``h`` after the gate), relative to
the training classes' mean.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..cli import ArgumentParser
from ..concepts import ConceptGraph

NEAR_ZERO = 0.05


def check_noise_step(noise_step: int, scheduler) -> None:
    """Refuse a noise step outside the scheduler's training steps: a negative one indexes from the end of its tables
    (another timestep, silently) and one past the end fails deep inside ``add_noise``."""
    steps = int(scheduler.config.num_train_timesteps)
    if isinstance(noise_step, bool) or not isinstance(noise_step, int) or not 0 <= noise_step < steps:
        raise ValueError(f"noise_step must be an integer in [0, {steps - 1}] (the scheduler's training steps), "
                         f"got {noise_step!r}")


@torch.no_grad()
def gate_statistics(unet, scheduler, graph: ConceptGraph, noise_step: int = 250, images_per_class: int = 32,
                    seed: int = 0) -> dict[str, Any]:
    """Per class of ``graph``: gate RMS, nearest-training cosine and near-zero fraction per decoder stage, and the
    modulated features' RMS on noisy real renders of the class (noised to ``noise_step`` by ``scheduler``)."""
    from ..images import uint8_to_signed
    from ..shapes import PAPER_COLOR_JITTER, PAPER_SIZE_JITTER, RenderConfig, render_classes

    check_noise_step(noise_step, scheduler)
    unet = unet.eval()
    device = unet.device
    names = [graph.format(node) for node in graph.nodes]
    concepts = torch.tensor(graph.nodes, dtype=torch.long, device=device)
    # canonical values for continuous variables; with scale_shift, the scales are the gates
    gates, _ = unet.split_concept_embedding(unet.concept_embedding(concepts).sum(dim=1))
    film = unet.config.concept_modulation in ("film", "scale_shift")
    training = [names.index(graph.format(c)) for c in graph.training_classes]

    # The decoder features right after the gate, per stage, on noisy real images of each class.
    captured: list[torch.Tensor] = []
    hooks = [stage.register_forward_pre_hook(lambda module, args: captured.append(args[0]))
             for stage in unet.up_stages]
    if unet.config.modulate_full_resolution:  # the gated full-resolution features: conv_out's input's first half
        full_resolution = unet.modulation_channels[-1]
        hooks.append(unet.conv_out.register_forward_pre_hook(
            lambda module, args: captured.append(args[0][:, :full_resolution])))
    config = RenderConfig(image_size=unet.config.sample_size, color_jitter=PAPER_COLOR_JITTER,
                          size_jitter=PAPER_SIZE_JITTER)
    generator = torch.Generator().manual_seed(seed)
    feature_rms = np.zeros((len(names), len(gates)))
    try:
        for i, node in enumerate(graph.nodes):
            batch = render_classes(graph.space, [node] * images_per_class, seed=seed + i, config=config)
            images = uint8_to_signed(batch.images).to(device)
            noise = torch.randn(images.shape, generator=generator).to(device)
            timesteps = torch.full((len(images),), noise_step, device=device)
            captured.clear()
            unet(scheduler.add_noise(images, noise, timesteps), timesteps, concepts[i].expand(len(images), -1))
            feature_rms[i] = [float(h.float().pow(2).mean().sqrt()) for h in captured]
    finally:
        for hook in hooks:
            hook.remove()

    result: dict[str, Any] = {"noise_step": noise_step, "modulation": unet.config.concept_modulation,
                              "training_classes": [names[t] for t in training], "classes": {}}
    reference = feature_rms[training].mean(axis=0)
    for i, name in enumerate(names):
        stages = []
        for stage, gate in enumerate(gates):
            g = gate[i].float()
            others = torch.stack([gate[t].float() for t in training if t != i])
            cosine = torch.nn.functional.cosine_similarity(g[None], others).max()
            effective = (1 + g) if film else g
            stages.append({
                "gate_rms": float(g.pow(2).mean().sqrt()),
                "nearest_training_cosine": float(cosine),
                "near_zero_fraction": float((effective.abs() < NEAR_ZERO).float().mean()),
                "feature_rms_vs_training": float(feature_rms[i, stage] / reference[stage]),
            })
        result["classes"][name] = {"level": graph.level(graph.nodes[i]), "stages": stages}
    return result


def gate_markdown(result: dict[str, Any]) -> str:
    """One row per class and decoder stage."""
    lines = [f"Concept gates (`{result['modulation']}`); features on real renders noised to step "
             f"{result['noise_step']}; training classes {', '.join(result['training_classes'])}.", "",
             "| class | level | stage | gate RMS | cosine to nearest training gate | gates near zero | "
             "feature RMS / training mean |", "|---|---|---|---|---|---|---|"]
    for name, entry in result["classes"].items():
        for stage, values in enumerate(entry["stages"]):
            lines.append(f"| {name} | {entry['level']} | {stage} | {values['gate_rms']:.3f} | "
                         f"{values['nearest_training_cosine']:.3f} | {values['near_zero_fraction']:.3f} | "
                         f"{values['feature_rms_vs_training']:.2f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    from diffusers import DDPMScheduler

    from ..evaluation.tracker import graph_from_record, read_log
    from ..models.tuple_unet import TupleConditionedUNet2DModel

    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="a training run's output directory (pipeline and learning_dynamics.jsonl)")
    parser.add_argument("--noise_step", type=int, default=250)
    parser.add_argument("--markdown", default=None, help="also write the table here")
    args = parser.parse_args(argv)

    scheduler = DDPMScheduler.from_pretrained(Path(args.model_dir) / "scheduler")
    check_noise_step(args.noise_step, scheduler)  # before the model and the log are read
    unet = TupleConditionedUNet2DModel.from_pretrained(Path(args.model_dir) / "unet")
    graph = graph_from_record(read_log(Path(args.model_dir) / "learning_dynamics.jsonl")[-1])
    result = gate_statistics(unet, scheduler, graph, noise_step=args.noise_step)
    text = gate_markdown(result)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return result


if __name__ == "__main__":
    main()
