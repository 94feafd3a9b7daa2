"""How well a tokenizer represents every class, held-out compositions included: the reconstruction accuracy of the
tokenizer (Paper B trains its token-space generators on a frozen VQ tokenizer, and its DiT on a VQ or a KL one).

The report reconstructs real images of every class (the dataset's ``test`` split) and scores the reconstructions with
the rules every compgen evaluation uses (:class:`~compgen.evaluation.scoring.ImageScorer`: probes, the one-object
check and, for the shapes data, the pixel-statistics scorer). It is not an upper bound for a generator: a generator
decodes token grids it draws itself, not the grids the encoder gives real images, and a class the tokenizer
reconstructs badly can still score well (evidence: ``results/dit-diagnosis/NOTES.md``, the MaskGIT + JEPA section;
``results/maskgit-jepa-h32-old-probes/NOTES.md``, section 2). A low score says that the encoder-decoder pair does not
carry the class through, which is worth knowing before reading a generator's accuracy on it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers import AutoencoderKL, VQModel

from ..atomic_io import atomic_write_text
from ..concepts import ConceptGraph
from ..eval_mode import eval_mode
from ..images import signed_to_uint8, uint8_to_signed
from ..models.kl_tokenizer import decode_kl_latents, encode_kl_latents
from ..models.vq_tokenizer import decode_indices, encode_to_indices
from .metrics import multiplicative_accuracy
from .probes import ConceptProbes
from .scoring import ImageScorer
from .tokenizer_tables import RECONSTRUCTION_REPORT_NAME, reconstruction_markdown, reconstruction_summary

__all__ = ["RECONSTRUCTION_REPORT_NAME", "code_coverage", "reconstruct", "reconstruction_markdown",
           "reconstruction_report", "reconstruction_summary"]



Tokenizer = VQModel | AutoencoderKL
"""Either tokenizer kind: a ``VQModel`` (codebook indices) or an ``AutoencoderKL`` (posterior means)."""


@torch.no_grad()
def reconstruct(vqvae: Tokenizer, images: np.ndarray | torch.Tensor, batch_size: int = 256) -> np.ndarray:
    """Encode uint8 ``(N, H, W, 3)`` images and decode them again (uint8, same shape): through codebook indices for
    a ``VQModel``, through the posterior mean for an ``AutoencoderKL``."""
    outputs = []
    with eval_mode(vqvae):
        for start in range(0, len(images), batch_size):
            batch = uint8_to_signed(images[start : start + batch_size]).to(vqvae.device)
            if isinstance(vqvae, AutoencoderKL):
                decoded = decode_kl_latents(vqvae, encode_kl_latents(vqvae, batch))
            else:
                decoded = decode_indices(vqvae, encode_to_indices(vqvae, batch))
            outputs.append(signed_to_uint8(decoded))
    return np.concatenate(outputs) if outputs else np.zeros((0, *tuple(images.shape[1:])), dtype=np.uint8)


def reconstruction_report(
    vqvae: Tokenizer,
    graph: ConceptGraph,
    probes: ConceptProbes,
    images: np.ndarray | torch.Tensor,
    concepts: np.ndarray | torch.Tensor,
    output_path: str | Path | None = None,
    tokenizer_data: str | None = None,
) -> dict[str, Any]:
    """Per class of ``graph`` (held-out ones included): reconstruction MSE (pixels in [0, 1]) and the multiplicative
    accuracy of the reconstructions and of the real images, by the probes and (shapes) the pixel scorer.

    ``images`` / ``concepts`` are real labelled images of every class (``(N, H, W, 3)`` uint8 and ``(N, V)``), e.g.
    the dataset's ``test`` split. ``tokenizer_data`` names what the tokenizer trained on (``--tokenizer_data``), so
    the report says it. Written as JSON to ``output_path`` when given.
    """
    real = np.asarray(images.cpu() if isinstance(images, torch.Tensor) else images)
    labels = np.asarray(concepts.cpu() if isinstance(concepts, torch.Tensor) else concepts)
    reconstructed = reconstruct(vqvae, real)
    scorer = ImageScorer(probes)
    real_scores, reconstructed_scores = scorer.score(real), scorer.score(reconstructed)
    per_class = {}
    for node in graph.nodes:
        name = graph.format(node)
        rows = (labels == np.asarray(node)).all(axis=1)
        if not rows.any():
            raise ValueError(f"the reference images hold no image of class {name}; give every class of the graph")
        error = (real[rows].astype(np.float64) - reconstructed[rows].astype(np.float64)) / 255.0
        target = np.asarray(node)
        entry = {
            "level": graph.level(node),
            "images": int(rows.sum()),
            "reconstruction_mse": float(np.mean(error**2)),
            "probe_accuracy_reconstructed": multiplicative_accuracy(reconstructed_scores.predictions[rows], target),
            "probe_accuracy_real": multiplicative_accuracy(real_scores.predictions[rows], target),
        }
        if reconstructed_scores.pixel_predictions is not None:
            entry["pixel_accuracy_reconstructed"] = multiplicative_accuracy(
                reconstructed_scores.pixel_predictions[rows], target)
        per_class[name] = entry
    report = {**_latent_summary(vqvae, real[:2048]), "classes": per_class,
        "tokenizer_data": tokenizer_data or "not recorded",
        "note": "Accuracy of reconstructions of real test images: how well the encoder-decoder pair carries each "
                "class through. It is not an upper bound for a generator, which decodes token grids it draws itself.",
    }
    if output_path is not None:
        atomic_write_text(Path(output_path), json.dumps(report, indent=2) + "\n")
    return report


@torch.no_grad()
def _latent_summary(vqvae: Tokenizer, images: np.ndarray) -> dict[str, Any]:
    """A VQ tokenizer's codebook usage on ``images``; a KL tokenizer's kind and latent channels (no codebook)."""
    if isinstance(vqvae, AutoencoderKL):
        return {"tokenizer": "kl", "latent_channels": vqvae.config.latent_channels}
    with eval_mode(vqvae):
        used = torch.unique(encode_to_indices(vqvae, uint8_to_signed(images).to(vqvae.device)))
    return {"codebook_size": vqvae.config.num_vq_embeddings, "codebook_entries_used": int(used.numel())}


@torch.no_grad()
def code_coverage(vqvae: VQModel, images: np.ndarray, labels: list[str], training_classes: list[str],
                  batch_size: int = 256) -> dict[str, dict[str, float]]:
    """Whether a class's token codes ever occur in the training classes' tokens (Paper B's question of what a
    token-space generator can compose): per class of ``labels``, the share of its images' tokens whose code occurs
    anywhere in the training classes' token grids (``anywhere``), and at the same grid position (``same_position``).
    A held-out class whose codes the training classes never use cannot be drawn by a generator that only learned
    their token statistics. ``images``: uint8 ``(N, H, W, 3)``, one label per image."""
    if len(images) != len(labels):
        raise ValueError(f"code_coverage needs one label per image, got {len(images)} images and {len(labels)} labels")
    if not set(training_classes) & set(labels):
        raise ValueError(f"code_coverage: none of the training classes {sorted(training_classes)} is among the labels")
    chunks = []
    with eval_mode(vqvae):
        for start in range(0, len(images), batch_size):
            batch = uint8_to_signed(images[start : start + batch_size]).to(vqvae.device)
            chunks.append(encode_to_indices(vqvae, batch).flatten(1).cpu())
    tokens = torch.cat(chunks)
    size, positions = vqvae.config.num_vq_embeddings, tokens.shape[1]
    training = torch.tensor([label in training_classes for label in labels])
    seen_at = torch.zeros(positions, size, dtype=torch.bool)
    seen_at[torch.arange(positions).expand_as(tokens[training]), tokens[training]] = True
    seen = seen_at.any(dim=0)
    coverage = {}
    for name in sorted(set(labels)):
        grid = tokens[torch.tensor([label == name for label in labels])]
        coverage[name] = {"anywhere": float(seen[grid].float().mean()),
                          "same_position": float(seen_at[torch.arange(positions).expand_as(grid), grid].float().mean()),
                          "training_class": name in training_classes}
    return coverage
