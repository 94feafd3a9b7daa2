"""Training task for the VQ tokenizer, and the tokenizer's reconstruction report (the ceiling for any generator
that decodes through it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import VQModel
from torch import nn

from ..concepts import ConceptGraph, ConceptSpace
from ..io import atomic_write_text
from ..models.vq_tokenizer import decode_indices, encode_to_indices
from .trainer import TrainingTask

RECONSTRUCTION_REPORT_NAME = "vq_reconstruction.json"


class VQTask(TrainingTask):
    """Pixel MSE of the reconstruction plus the VQ codebook / commitment loss (diffusers' ``VectorQuantizer``).

    ``generate`` *reconstructs* freshly rendered real images of the requested classes, so the shared evaluation
    tracker scores the tokenizer exactly as it scores a generator: the result is the ceiling of any generator
    decoding through this tokenizer.
    """

    def __init__(self, vqvae: VQModel, space: ConceptSpace, eval_batch_size: int = 256) -> None:
        self.model = vqvae
        self.space = space
        self.eval_batch_size = eval_batch_size

    def compute_loss(self, model, batch, generator, step):
        output = model(batch["images"])
        reconstruction_loss = F.mse_loss(output.sample.float(), batch["images"])
        commit_loss = output.commit_loss.float().mean()
        return reconstruction_loss + commit_loss, {"reconstruction_mse": reconstruction_loss.item(),
                                                  "commit_loss": commit_loss.item()}

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
