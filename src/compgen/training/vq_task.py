"""Training task for the VQ tokenizer, and the tokenizer's reconstruction report (the ceiling for any generator
that decodes through it)."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import VQModel
from torch import nn

from ..concepts import ConceptGraph, ConceptSpace
from ..io import atomic_write_text
from ..models.vq_tokenizer import build_vq_tokenizer, decode_indices, encode_to_indices
from .script import TrainingRun
from .trainer import TrainingTask

logger = logging.getLogger(__name__)

RECONSTRUCTION_REPORT_NAME = "vq_reconstruction.json"

VQ_PRESETS: dict[str, dict[str, Any]] = {
    "paper": dict(vq_block_out_channels="64,128,128", vq_embed_dim=128, vq_steps=5000, vq_learning_rate=1e-3),
    # About 2 minutes single-threaded. Local training crops, no mid-block attention and dead-code restarts lift the
    # held-out classes' reconstruction probe accuracy on H32-train1 from ~0 to >= 0.97, except 111 (see the README).
    "cpu-quick": dict(vq_block_out_channels="16,32,32", vq_embed_dim=16, vq_steps=2500, vq_learning_rate=2e-3,
                      vq_crop_size=16, mixed_precision="bf16"),
}
"""Tokenizer options per preset, shared by ``train_vq_tokenizer.py`` and ``train_maskgit_jepa.py``."""


class VQTask(TrainingTask):
    """Pixel MSE of the reconstruction plus the VQ codebook / commitment loss (diffusers' ``VectorQuantizer``).

    ``generate`` *reconstructs* freshly rendered real images of the requested classes, so the shared evaluation
    tracker scores the tokenizer exactly as it scores a generator: the result is the ceiling of any generator
    decoding through this tokenizer.

    Codebook usage: short runs otherwise settle on a few dozen of the 256 codes, too few to represent held-out
    compositions. Two remedies, both on by default:

    - the standard VQ-VAE loss weighting (codebook term 1, commitment ``commitment_cost``); diffusers' quantizer
      defaults to its ``legacy`` weighting, which moves the codebook 4x slower than the encoder;
    - *dead-code restarts*: every ``restart_every`` steps until ``restart_until`` (a fraction of ``total_steps``),
      codes that no latent of the current batch chose are reset to randomly chosen latents of that batch. The draw
      uses a generator seeded by the step, so a resumed run restarts exactly the same codes.

    Held-out compositions: with ``crop_size`` the tokenizer trains on random crops (positions drawn from the step's
    generator), and :func:`build_vq_tokenizer` leaves out the mid-block attention by default. Both keep the codes
    local: trained on whole images with global context, the encoder learns shortcuts such as "small object, so
    red" (all small training objects are red circles) and reconstructs a small blue circle as a red blob.

    Args:
        vqvae: The tokenizer to train.
        space: Concept space of the data (for rendering evaluation images).
        commitment_cost: Weight of the commitment term (beta).
        restart_every: Steps between dead-code restarts; 0 disables them.
        restart_until: Last fraction of ``total_steps`` at which restarts happen (the codebook then settles).
        total_steps: Training length, for ``restart_until``.
        seed: Run seed, mixed into the restart draws.
        crop_size: Train on one random ``crop_size`` crop per image (a multiple of the downsampling); 0: whole
            images.
    """

    def __init__(
        self,
        vqvae: VQModel,
        space: ConceptSpace,
        eval_batch_size: int = 256,
        commitment_cost: float = 0.25,
        restart_every: int = 25,
        restart_until: float = 0.8,
        total_steps: int = 1,
        seed: int = 0,
        crop_size: int = 0,
    ) -> None:
        self.model = vqvae
        self.space = space
        self.eval_batch_size = eval_batch_size
        vqvae.quantize.legacy = False
        vqvae.quantize.beta = commitment_cost
        self.restart_every = restart_every
        self.last_restart_step = int(restart_until * total_steps)
        self.seed = seed
        self.crop_size = crop_size
        self._images: torch.Tensor | None = None

    def compute_loss(self, model, batch, generator, step):
        images = batch["images"]
        if self.crop_size:
            images = random_crops(images, self.crop_size, generator)
        self._images = images
        output = model(images)
        reconstruction_loss = F.mse_loss(output.sample.float(), images)
        commit_loss = output.commit_loss.float().mean()
        return reconstruction_loss + commit_loss, {"reconstruction_mse": reconstruction_loss.item(),
                                                  "commit_loss": commit_loss.item()}

    @torch.no_grad()
    def after_optimizer_step(self, model, step):
        due = self.restart_every and step % self.restart_every == 0 and step <= self.last_restart_step
        if not due or self._images is None:
            return {}
        latents = model.encode(self._images.to(model.dtype)).latents
        return {"codes_restarted": float(restart_dead_codes(model, latents, step + self.seed * 1_000_003))}

    @torch.no_grad()
    def generate(self, model, concepts, seed):
        return reconstruct_rendered(model, self.space, concepts, seed, batch_size=self.eval_batch_size)[1]

    def save_pretrained(self, model, output_dir: Path) -> None:
        model.save_pretrained(output_dir, safe_serialization=True)

    def model_card_details(self) -> dict[str, Any]:
        config = self.model.config
        return {
            "model_name": "VQModel tokenizer",
            "pipeline_class": "VQModel",
            "tags": ["vqvae", "tokenizer"],
            "hyperparameters": {
                "block_out_channels": list(config.block_out_channels),
                "num_vq_embeddings": config.num_vq_embeddings,
                "vq_embed_dim": config.vq_embed_dim,
            },
        }


def random_crops(images: torch.Tensor, size: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """One random ``size`` x ``size`` crop per image of ``(B, C, H, W)``, positions drawn from ``generator``."""
    height, width = images.shape[-2:]
    if not 0 < size <= min(height, width):
        raise ValueError(f"crop_size must be in 1..{min(height, width)}, got {size}")
    tops = torch.randint(height - size + 1, (len(images),), generator=generator).tolist()
    lefts = torch.randint(width - size + 1, (len(images),), generator=generator).tolist()
    return torch.stack([image[:, t : t + size, s : s + size] for image, t, s in zip(images, tops, lefts, strict=True)])


@torch.no_grad()
def restart_dead_codes(vqvae: VQModel, latents: torch.Tensor, seed: int) -> int:
    """Reset the codebook entries that no vector of ``latents`` ``(B, C, h, w)`` quantizes to, to randomly chosen
    latent vectors (drawn with a generator seeded by ``seed``); returns how many were reset."""
    codebook = vqvae.quantize.embedding.weight
    vectors = latents.float().permute(0, 2, 3, 1).reshape(-1, codebook.shape[1])
    used = torch.zeros(codebook.shape[0], dtype=torch.bool)
    used[torch.cdist(vectors, codebook.float()).argmin(dim=1).cpu()] = True
    dead = (~used).nonzero()[:, 0]
    if len(dead):
        generator = torch.Generator().manual_seed(seed)
        picks = torch.randint(len(vectors), (len(dead),), generator=generator)
        codebook.data[dead.to(codebook.device)] = vectors[picks.to(vectors.device)].to(codebook.dtype)
    return len(dead)


def _to_uint8(images: torch.Tensor) -> np.ndarray:
    """``(B, 3, H, W)`` in [-1, 1] -> uint8 ``(B, H, W, 3)``."""
    array = ((images.float().clamp(-1, 1) + 1) * 127.5).round().byte()
    return array.permute(0, 2, 3, 1).cpu().numpy()


@torch.no_grad()
def reconstruct_rendered(
    vqvae: VQModel, space: ConceptSpace, concepts: list[str], seed: int, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Render one real image per class string in ``concepts`` and reconstruct it; returns (real, reconstructed)
    as uint8 ``(N, H, W, 3)``."""
    from ..shapes import RenderConfig, render_classes

    classes = np.array([space.parse(name) for name in concepts], dtype=np.int64)
    real = render_classes(space, classes, seed=seed, config=RenderConfig(image_size=vqvae.config.sample_size)).images
    was_training = vqvae.training
    vqvae.eval()
    outputs = []
    for start in range(0, len(real), batch_size):
        images = torch.from_numpy(real[start : start + batch_size]).permute(0, 3, 1, 2).float() / 127.5 - 1
        outputs.append(_to_uint8(decode_indices(vqvae, encode_to_indices(vqvae, images))))
    vqvae.train(was_training)
    return real, np.concatenate(outputs)


def reconstruction_report(
    vqvae: VQModel,
    graph: ConceptGraph,
    probes: nn.Module,
    images_per_class: int = 100,
    seed: int = 12345,
    output_path: str | Path | None = None,
) -> dict[str, Any]:
    """Per class of ``graph`` (held-out ones included): reconstruction MSE (pixels in [0, 1]) and the probes'
    multiplicative accuracy on the reconstructions and on the real images. Written as JSON to ``output_path``.

    The tokenizer is trained on the training classes only; the held-out classes' reconstruction accuracy is the
    ceiling any generator that decodes through this tokenizer can reach on them.
    """
    from ..evaluation.metrics import multiplicative_accuracy

    names = [graph.format(node) for node in graph.nodes]
    requested = [name for name in names for _ in range(images_per_class)]
    real, reconstructed = reconstruct_rendered(vqvae, graph.space, requested, seed)
    real_predictions = probes.predict(real).numpy()
    reconstructed_predictions = probes.predict(reconstructed).numpy()
    levels = {graph.format(node): graph.level(node) for node in graph.nodes}
    per_class = {}
    for i, (name, node) in enumerate(zip(names, graph.nodes, strict=True)):
        rows = slice(i * images_per_class, (i + 1) * images_per_class)
        error = (real[rows].astype(np.float64) - reconstructed[rows].astype(np.float64)) / 255.0
        per_class[name] = {
            "level": levels[name],
            "reconstruction_mse": float(np.mean(error**2)),
            "probe_accuracy_reconstructed": multiplicative_accuracy(reconstructed_predictions[rows], np.asarray(node)),
            "probe_accuracy_real": multiplicative_accuracy(real_predictions[rows], np.asarray(node)),
        }
    with torch.no_grad():
        images = torch.from_numpy(real).permute(0, 3, 1, 2).float() / 127.5 - 1
        used = torch.unique(encode_to_indices(vqvae, images[:2048]))
    report = {
        "images_per_class": images_per_class,
        "seed": seed,
        "codebook_size": vqvae.config.num_vq_embeddings,
        "codebook_entries_used": int(used.numel()),
        "classes": per_class,
        "note": "The tokenizer saw the training classes only. The probe accuracy of reconstructed held-out classes "
                "is the ceiling for any generator decoding through this tokenizer.",
    }
    if output_path is not None:
        import json

        atomic_write_text(Path(output_path), json.dumps(report, indent=2) + "\n")
    return report


def reconstruction_summary(report: dict[str, Any]) -> str:
    """One line for a model card: ``000: 1.00 (mse 0.0012), ...`` per class, probe accuracy of reconstructions."""
    return ", ".join(
        f"{name} (L{entry['level']}): {entry['probe_accuracy_reconstructed']:.2f} "
        f"(mse {entry['reconstruction_mse']:.4f})"
        for name, entry in report["classes"].items()
    )


def reconstruction_markdown(report: dict[str, Any]) -> str:
    """The reconstruction report as a model-card table: the ceiling of any generator using this tokenizer."""
    lines = [
        "Probe accuracy of VQ reconstructions of real images (held-out classes included): no generator decoding "
        f"through this tokenizer can score higher. Codebook entries used: {report['codebook_entries_used']} of "
        f"{report['codebook_size']}.",
        "",
        "| class | level | probe accuracy of reconstructions | reconstruction MSE |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {entry['level']} | {entry['probe_accuracy_reconstructed']:.2f} | "
        f"{entry['reconstruction_mse']:.4f} |"
        for name, entry in report["classes"].items()
    ]
    return "\n".join(lines)


def add_vq_tokenizer_arguments(parser: argparse.ArgumentParser) -> None:
    """The tokenizer's architecture and training flags, shared by every script that trains one."""
    group = parser.add_argument_group("VQ tokenizer")
    group.add_argument("--vq_block_out_channels", default="32,64,64", help="3 entries = downsampling 4")
    group.add_argument("--codebook_size", type=int, default=256)
    group.add_argument("--vq_embed_dim", type=int, default=32)
    group.add_argument("--vq_mid_attention", action=argparse.BooleanOptionalAction, default=False,
                       help="self-attention in the encoder/decoder mid blocks (global context; off by default)")
    group.add_argument("--vq_commitment_cost", type=float, default=0.25)
    group.add_argument("--vq_restart_every", type=int, default=25, help="steps between dead-code restarts; 0: off")
    group.add_argument("--vq_crop_size", type=int, default=16,
                       help="train on random crops of this size (a multiple of the downsampling; 0: whole images)")


def build_vq_tokenizer_from_args(args: argparse.Namespace, sample_size: int) -> VQModel:
    """A fresh tokenizer from the flags of :func:`add_vq_tokenizer_arguments` (weights seeded by ``--seed``)."""
    torch.manual_seed(args.seed)
    return build_vq_tokenizer(
        sample_size=sample_size,
        block_out_channels=tuple(int(c) for c in args.vq_block_out_channels.split(",")),
        num_vq_embeddings=args.codebook_size,
        vq_embed_dim=args.vq_embed_dim,
        mid_block_add_attention=args.vq_mid_attention,
    )


def train_vq_tokenizer(
    args: argparse.Namespace, run: TrainingRun, output_dir: str | Path, **config_overrides: Any
) -> tuple[VQModel, dict[str, Any] | None]:
    """Build a tokenizer from the flags, train it on ``run``'s training split into ``output_dir`` through the
    shared loop, and write its reconstruction report there (when ``run`` has probes).

    Returns the trained tokenizer (reloaded from ``output_dir``, in eval mode) and the report (or ``None``).
    ``config_overrides`` replace fields of the run's config (e.g. the step count of a tokenizer trained before a
    generator).
    """
    output_dir = Path(output_dir)
    vqvae = build_vq_tokenizer_from_args(args, run.train_data.image_size)
    steps = config_overrides.get("max_train_steps", run.config.max_train_steps)
    task = VQTask(vqvae, run.train_data.space, commitment_cost=args.vq_commitment_cost,
                  restart_every=args.vq_restart_every, total_steps=steps, seed=args.seed, crop_size=args.vq_crop_size)
    run.train(task, probes=False, output_dir=str(output_dir), **config_overrides)
    trained = VQModel.from_pretrained(output_dir).eval()
    return trained, report_for_run(trained, run, output_dir)


def report_for_run(vqvae: VQModel, run: TrainingRun, output_dir: str | Path) -> dict[str, Any] | None:
    """The :func:`reconstruction_report` of ``vqvae`` on ``run``'s graph and probes, written to ``output_dir`` and
    logged; ``None`` when the run has no probes."""
    if run.probes is None:
        return None
    report = reconstruction_report(vqvae, run.graph, run.probes,
                                   output_path=Path(output_dir) / RECONSTRUCTION_REPORT_NAME)
    logger.info("VQ reconstruction probe accuracy: %s", reconstruction_summary(report))
    return report
