"""Train Paper A's official U-Net (``ContextUnet`` of phys-ai/concept_graphs) on compgen's data, through compgen's loop.

    git clone https://github.com/phys-ai/concept_graphs /path/to/concept_graphs
    python examples/compare_peer_unet.py --peer_dir /path/to/concept_graphs --preset cpu-quick --output_dir runs/peer

takes every flag of the ``tuple-unet`` recipe (presets, data, optimizer, evaluation) and swaps compgen's
``TupleConditionedUNet2DModel`` for the official ``ContextUnet`` at the same base width (``--block_out_channels``'s
first entry as its ``n_feat``): same data, same DDPM objective, same sampler, same scorers. Run
``train_tuple_unet.py`` with the same flags beside it and compare the two ``learning_dynamics.jsonl`` logs
(``results/paper-a-cpu-flat-rotated-superseded/`` holds such a pair). This answers "does the official architecture
draw what ours does not?" with everything else held equal.

Nothing of the peer is copied into compgen: its ``train.py`` is imported from ``--peer_dir``. That file imports
torchvision and einops at the top for parts ``ContextUnet`` does not use (datasets, attention variants); when they are
not installed, empty stand-in modules take their place. The peer is conditioned as in its own code: the shape as a
one-hot vector, the colour as its RGB value and the size as its scale, each through its own embedding MLP, the
embeddings summed; time enters as ``t / T``.
"""

from __future__ import annotations

import argparse
import sys
import types
from pathlib import Path
from typing import Any

import torch
from diffusers.configuration_utils import ConfigMixin, register_to_config
from diffusers.models.modeling_utils import ModelMixin
from diffusers.models.unets.unet_2d import UNet2DOutput
from safetensors.torch import save_file

from compgen import TupleConditionedUNet2DModel
from compgen.cli import ArgumentParser, parse_widths
from compgen.concepts import ConceptSpace
from compgen.launch.run_setup import prepare_run
from compgen.pipelines.tuple_ddpm import paper_ddpm_scheduler
from compgen.recipes import tuple_unet
from compgen.studies.runner import load_script
from compgen.training.tasks.ddpm import DDPMTask


def import_peer(peer_dir: str | Path) -> types.ModuleType:
    """The peer's ``train.py`` as a module (stand-ins for torchvision and einops if they are missing)."""
    peer_dir = Path(peer_dir)
    if not (peer_dir / "train.py").is_file():
        raise FileNotFoundError(f"--peer_dir {peer_dir}: no train.py (a checkout of phys-ai/concept_graphs)")
    stand_ins = []
    for name in ("torchvision", "torchvision.datasets", "torchvision.utils", "einops"):
        try:
            __import__(name)
        except Exception:
            stand_in = types.ModuleType(name)
            for attribute in ("models", "transforms", "MNIST", "ImageFolder", "save_image", "make_grid", "rearrange",
                              "repeat", "reduce", "pack", "unpack"):
                setattr(stand_in, attribute, None)
            sys.modules[name] = stand_in
            stand_ins.append(name)
    sys.path.insert(0, str(peer_dir))
    try:
        return load_script(peer_dir / "train.py")
    finally:
        sys.path.remove(str(peer_dir))
        for name in stand_ins:  # other libraries probe for these packages: leave no trace
            sys.modules.pop(name, None)


class PeerUNet(ModelMixin, ConfigMixin):
    """The official ``ContextUnet`` behind compgen's denoiser interface (``forward(sample, timestep, concepts,
    concept_values)``), so DDPMTask, the pipeline and the evaluation use it unchanged."""

    @register_to_config
    def __init__(self, concept_space: list, continuous_concepts: dict[str, list[list[float]]], sample_size: int = 28,
                 in_channels: int = 3, n_feat: int = 64, num_train_timesteps: int = 500,
                 conditioning: str = "full", concept_dropout: float = 0.0) -> None:
        super().__init__()
        self.space = ConceptSpace.from_dict(concept_space)
        if self.space.names != ("shape", "color", "size"):
            raise ValueError(f"the official ContextUnet is conditioned on (shape, color, size), got {self.space.names}")
        self.register_buffer("color_values", torch.tensor(continuous_concepts["color"]), persistent=False)
        self.register_buffer("size_values", torch.tensor(continuous_concepts["size"]), persistent=False)
        self.net = PEER.ContextUnet(in_channels=in_channels, n_feat=n_feat,
                                    n_classes=[self.space.cardinalities[0], 3, 1])

    @property
    def concept_space(self) -> ConceptSpace:
        return self.space

    has_null_embeddings = False

    def forward(self, sample, timestep, concepts, concept_values=None, drop_mask=None, return_dict=True):
        if concept_values is None:
            rgb, size = self.color_values[concepts[:, 1]], self.size_values[concepts[:, 2]]
        else:
            rgb, size = concept_values[:, :3], concept_values[:, 3:4]
        timesteps = torch.as_tensor(timestep, device=sample.device).float().expand(len(sample))
        out = self.net(sample, [concepts[:, 0], rgb.to(sample.dtype), size.to(sample.dtype)],
                       timesteps / self.config.num_train_timesteps)
        return UNet2DOutput(sample=out) if return_dict else (out,)


class PeerDDPMTask(DDPMTask):
    """compgen's DDPM task on the peer model; the export is the peer's weights (its class lives outside compgen)."""

    def save_pretrained(self, model, output_dir: Path) -> None:
        output_dir.mkdir(parents=True, exist_ok=True)
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(output_dir / "peer_unet.safetensors"))
        model.save_config(output_dir)

    def model_card_details(self) -> dict[str, Any]:
        return {
            "model_name": "Official ContextUnet (phys-ai/concept_graphs), trained by compgen",
            "pipeline_class": "TupleConditionedDDPMPipeline",
            "tags": ["ddpm", "unet", "peer"],
            "hyperparameters": {"n_feat": self.model.config.n_feat,
                                "prediction_type": self.scheduler.config.prediction_type,
                                "eval_sampler": f"DDIM, {self.eval_inference_steps} steps"},
        }


PEER: types.ModuleType


def main(argv: list[str] | None = None) -> None:
    global PEER
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--peer_dir", required=True,
                        help="a local checkout of https://github.com/phys-ai/concept_graphs")
    parser.add_argument("--block_out_channels", default="64,128", help="the first entry is the peer's n_feat")
    for option in ("conditioning", "num_train_timesteps", "prediction_type", "layers_per_block",
                   "eval_inference_steps", "concept_dropout", "concept_modulation", "block_type", "norm_type"):
        parser.add_argument(f"--{option}", default=None, help=argparse.SUPPRESS)  # accepted for flag parity
    PEER = import_peer(parser.parse_known_args(argv)[0].peer_dir)
    args, config, run = prepare_run(parser, tuple_unet.PRESETS, argv, model_class=TupleConditionedUNet2DModel)
    peer = PeerUNet(
        concept_space=run.train_data.space.to_pairs(),
        continuous_concepts=run.continuous_concepts,
        sample_size=run.train_data.image_size,
        n_feat=parse_widths(args.block_out_channels, "block_out_channels")[0],
        num_train_timesteps=int(args.num_train_timesteps or 500),
    )
    scheduler = paper_ddpm_scheduler(int(args.num_train_timesteps or 500), args.prediction_type or "epsilon")
    run.train(PeerDDPMTask(peer, scheduler, eval_inference_steps=int(args.eval_inference_steps or 20)))


if __name__ == "__main__":
    main()
