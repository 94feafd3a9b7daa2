"""Which tokenizer a token model reads: ``--tokenizer vq|kl`` (a diffusers ``VQModel`` or ``AutoencoderKL``, Paper B's
discrete and continuous tokenizers), its flags and checks, loading a saved one by its kind, and the tokenizer a
fine-tuning run keeps (its source's). The tokenizer-first workflow that trains one is
:mod:`compgen.launch.token_model_setup`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import torch
from diffusers import AutoencoderKL, VQModel
from safetensors.torch import load_file

from ..training.fine_tuning import InitialWeights
from ..training.tasks.kl_tokenizer import DEFAULT_KL_WEIGHT

TOKENIZER_CLASSES: dict[str, type[VQModel] | type[AutoencoderKL]] = {"vq": VQModel, "kl": AutoencoderKL}
"""``--tokenizer`` kinds and the diffusers class of each (the ``_class_name`` of its ``config.json``)."""


def add_tokenizer_kind_arguments(parser: argparse.ArgumentParser, allow_kl: bool) -> None:
    """``--tokenizer vq|kl`` and, with ``allow_kl``, the KL tokenizer's own flags. The KL tokenizer shares the
    architecture and training flags of the VQ one (``--tokenizer_block_out_channels``, ``--tokenizer_mid_attention``,
    ``--tokenizer_crop_size``, ``--tokenizer_steps``, ``--tokenizer_learning_rate``: the "tokenizer" flags serve both
    kinds)."""
    group = parser.add_argument_group(
        "tokenizer kind", "--tokenizer kl (a diffusers AutoencoderKL, Paper B's continuous tokenizer) reuses "
        "--tokenizer_block_out_channels, --tokenizer_mid_attention, --tokenizer_crop_size, --tokenizer_steps and "
        "--tokenizer_learning_rate; "
        "--codebook_size, --tokenizer_commitment_cost and --tokenizer_restart_every are VQ only" if allow_kl else None)
    group.add_argument("--tokenizer", default="vq", choices=sorted(TOKENIZER_CLASSES),
                       help="vq: VQModel (codebook); kl: AutoencoderKL (posterior means)" if allow_kl
                       else "vq only here (this model predicts codebook indices)")
    if allow_kl:
        group.add_argument("--kl_latent_channels", type=int, default=None,
                           help="latent channels of the KL tokenizer; default: --tokenizer_embed_dim (the same DiT "
                                "shape)")
        group.add_argument("--kl_weight", type=float, default=DEFAULT_KL_WEIGHT,
                           help="weight of the per-element KL term against the per-pixel MSE (see KLTask)")


def kl_latent_channels(args: argparse.Namespace) -> int:
    """``--kl_latent_channels``, or ``--tokenizer_embed_dim`` when it is not given."""
    return args.kl_latent_channels if args.kl_latent_channels is not None else args.tokenizer_embed_dim


def kl_tokenizer_options(args: argparse.Namespace, options: dict[str, Any]) -> dict[str, Any]:
    """The options of a KL tokenizer: the VQ ones it shares (the VQ-only ones dropped), its kind and KL flags."""
    vq_only = ("codebook_size", "tokenizer_embed_dim", "tokenizer_commitment_cost", "tokenizer_restart_every")
    return {k: v for k, v in options.items() if k not in vq_only} | {
        "tokenizer": "kl", "kl_latent_channels": kl_latent_channels(args), "kl_weight": args.kl_weight}


def tokenizer_kind(path: str | Path) -> str:
    """``"vq"`` or ``"kl"``: the tokenizer class a saved tokenizer's ``config.json`` names (``_class_name``)."""
    class_name = VQModel.load_config(path).get("_class_name")
    for kind, cls in TOKENIZER_CLASSES.items():
        if class_name == cls.__name__:
            return kind
    raise ValueError(f"{path} holds a {class_name}, not a tokenizer (VQModel or AutoencoderKL)")


def fine_tuning_tokenizer(args: argparse.Namespace, initial: InitialWeights | None) -> Path | None:
    """With ``--init_from`` (``initial``, resolved once by :func:`~compgen.launch.init_from.check_init_from`), the
    tokenizer the source's model read, kept as it is: the loaded transformer has learned its tokens (and a latent
    model its latent statistics), so retraining it on the new data would hand the transformer latents it was never
    trained on. ``None`` without ``--init_from``, or when the source does not
    record its tokenizer and ``--tokenizer_path`` names one. Refuses, before any work, a source without a tokenizer, one
    of the other kind than ``--tokenizer`` and a ``--tokenizer_path`` with other weights."""
    if initial is None:
        return None
    source = initial.tokenizer
    given = getattr(args, "tokenizer_path", None)
    if source is None:
        if given is None:
            raise ValueError(f"--init_from {args.init_from}: the tokenizer its model read is not there (no vqvae/ or "
                             "vae/ beside an export, no tokenizer/ or recorded --tokenizer_path beside a checkpoint); "
                             "pass it with --tokenizer_path")
        return None
    kind, found = getattr(args, "tokenizer", "vq"), tokenizer_kind(source)
    if found != kind:
        raise ValueError(f"--init_from {args.init_from}: its model read a {TOKENIZER_CLASSES[found].__name__} "
                         f"({source}), but --tokenizer is {kind}; a fine-tuned model keeps its tokenizer: pass "
                         f"--tokenizer {found}")
    if given is not None and Path(given).resolve() != source.resolve():
        weights = "diffusion_pytorch_model.safetensors"
        mine, theirs = load_file(str(Path(given) / weights)), load_file(str(source / weights))
        if set(mine) != set(theirs) or any(not torch.equal(mine[k], theirs[k]) for k in mine):
            raise ValueError(f"--tokenizer_path {given} is not the tokenizer the --init_from model read ({source}); a "
                             "fine-tuned model keeps its tokenizer: leave --tokenizer_path out")
    return source


def load_tokenizer(path: str | Path) -> VQModel | AutoencoderKL:
    """The saved tokenizer at ``path`` as its own class (in eval mode), from its ``config.json``."""
    return TOKENIZER_CLASSES[tokenizer_kind(path)].from_pretrained(path).eval()


def check_tokenizer_kind(args: argparse.Namespace, allow_kl: bool) -> None:
    """Refuse ``--tokenizer kl`` where it is not allowed, bad KL flags, and a ``--tokenizer_path`` of the other kind."""
    kind = getattr(args, "tokenizer", "vq")
    if kind == "kl" and not allow_kl:
        raise ValueError("--tokenizer kl: this model predicts codebook indices, which a KL tokenizer does not have; "
                         "use --tokenizer vq (examples/train_dit.py takes --tokenizer kl)")
    if kind == "kl" and (kl_latent_channels(args) < 1 or not 0 <= args.kl_weight < float("inf")):
        raise ValueError(f"--kl_latent_channels must be at least 1 and --kl_weight a finite number >= 0, got "
                         f"{kl_latent_channels(args)} and {args.kl_weight}")
    path = getattr(args, "tokenizer_path", None)
    if path is not None and not Path(path, "config.json").is_file():
        exports = [name for name in ("vqvae", "vae", "tokenizer") if Path(path, name, "config.json").is_file()]
        hint = f"; it is a run or pipeline export: pass {Path(path, exports[0])}" if exports else ""
        raise ValueError(f"--tokenizer_path {path} holds no tokenizer (no config.json there){hint}")
    if path is not None and Path(path, "config.json").is_file():
        found = tokenizer_kind(args.tokenizer_path)
        if found != kind:
            raise ValueError(f"--tokenizer_path {args.tokenizer_path} holds a {TOKENIZER_CLASSES[found].__name__} but "
                             f"--tokenizer is {kind}; pass --tokenizer {found}"
                             + ("" if allow_kl or found == "vq" else " (not available to this model)"))
