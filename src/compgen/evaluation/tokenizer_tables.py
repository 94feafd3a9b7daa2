"""How a tokenizer's reconstruction report reads: its file name, one log line and the model-card table. Plain
dictionaries only, so that a study summary can print the reports without importing torch or diffusers (the report
itself is computed by :mod:`compgen.evaluation.tokenizer_report`)."""

from __future__ import annotations

from typing import Any

RECONSTRUCTION_REPORT_NAME = "vq_reconstruction.json"

TOKENIZER_DATA_WORDS = {
    "all-classes": "all-classes (images of every class of the concept space, labels unused)",
    "training-classes": "training-classes (the training split only)",
}


def reconstruction_summary(report: dict[str, Any]) -> str:
    """One line for a log: ``000 (L0): 1.00 / 0.98 (mse 0.0012), ...`` per class, the accuracy of reconstructions by
    the probes / the pixel scorer, after what the tokenizer trained on."""
    return f"trained on {report.get('tokenizer_data', 'not recorded')}; " + ", ".join(
        f"{name} (L{entry['level']}): {entry['probe_accuracy_reconstructed']:.2f}"
        + (f" / {entry['pixel_accuracy_reconstructed']:.2f}" if "pixel_accuracy_reconstructed" in entry else "")
        + f" (mse {entry['reconstruction_mse']:.4f})"
        for name, entry in report["classes"].items()
    )


def reconstruction_markdown(report: dict[str, Any]) -> str:
    """The reconstruction report as a model-card table (the tokenizer's reconstruction accuracy per class)."""
    pixel = all("pixel_accuracy_reconstructed" in entry for entry in report["classes"].values())
    if "codebook_size" in report:
        kind, usage = "VQ", (f" Codebook entries used: {report['codebook_entries_used']} of "
                             f"{report['codebook_size']}.")
    else:
        kind, usage = "KL", f" Latent channels: {report.get('latent_channels')} (posterior means, no codebook)."
    lines = [
        f"Accuracy of {kind} reconstructions of real test images (held-out classes included): the tokenizer's "
        "reconstruction accuracy, not an upper bound for the generator, which decodes token grids it draws itself."
        + usage + f" Trained on: {TOKENIZER_DATA_WORDS.get(report.get('tokenizer_data'), 'not recorded')}.",
        "",
        "| class | level | probes on reconstructions |" + (" pixel scorer on reconstructions |" if pixel else "")
        + " reconstruction MSE |",
        "|---|---|---|---|" + ("---|" if pixel else ""),
    ]
    for name, entry in report["classes"].items():
        row = f"| {name} | {entry['level']} | {entry['probe_accuracy_reconstructed']:.2f} |"
        if pixel:
            row += f" {entry['pixel_accuracy_reconstructed']:.2f} |"
        lines.append(row + f" {entry['reconstruction_mse']:.4f} |")
    return "\n".join(lines)
