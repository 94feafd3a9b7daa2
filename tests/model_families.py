"""The one table of model families that every contract test reads (``FAMILIES``).

A row is a family: the model class it covers, a seeded tiny model, the inputs and the forward pass it is checked on,
its pipeline and its training task(s). The contract tests (``test_model_contract``, ``test_pipeline_conventions``,
``test_device_placement``, ``test_compiled_steps``, ``test_transformer_block``) are parametrized over the whole table,
so a new family joins every contract by adding one row here. Where a contract does not apply to a family (a tokenizer
has no sampling pipeline and no concepts) the row says so in ``excluded`` with the reason, and the test skips with it
(:func:`require`): an exclusion is listed, never silent. ``test_model_contract`` checks that every ``ModelMixin``
class ``compgen.models`` exports has a row, and that the exclusions are consistent with the rows.

The space is shape x color (3 values) x size: its variable order is not alphabetical (diffusers writes configs with
sorted keys) and its cardinalities differ, so a permuted order on reload turns ``"021"`` into an out-of-range class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
import torch
from diffusers import AutoencoderKL, DDPMScheduler, VQModel
from diffusers.pipelines.pipeline_utils import DiffusionPipeline

from compgen import (
    GIVTPipeline,
    GIVTTransformer,
    MARPipeline,
    MARTransformer,
    MaskGITPipeline,
    MaskGITScheduler,
    MaskGITTransformer,
    TupleConditionedDiT,
    TupleConditionedDiTPipeline,
    TupleConditionedFlowDiTPipeline,
    TupleConditionedUNet2DModel,
    shapes_space,
)
from compgen.models.kl_tokenizer import build_kl_tokenizer
from compgen.models.masked_latent_transformer import MaskedLatentTransformer
from compgen.models.vq_tokenizer import build_vq_tokenizer
from compgen.pipelines.concept_inputs import ConceptInputs, prepare_concept_inputs
from compgen.pipelines.flow_dit import flow_matching_scheduler
from compgen.pipelines.flow_dit_video import FlowDiTVideoPipeline
from compgen.pipelines.maskgit_video import MaskGITVideoPipeline
from compgen.pipelines.tuple_ddpm import TupleConditionedDDPMPipeline
from compgen.shapes import shapes_continuous_concepts
from compgen.training.tasks.base import TrainingTask
from compgen.training.tasks.ddpm import DDPMTask
from compgen.training.tasks.dit import DiTTask
from compgen.training.tasks.flow_matching import FlowDiTVideoTask, FlowMatchingDiTTask
from compgen.training.tasks.givt import GIVTTask
from compgen.training.tasks.kl_tokenizer import KLTask
from compgen.training.tasks.latent_tokenizer import precompute_latents
from compgen.training.tasks.mar import MARTask
from compgen.training.tasks.maskgit import MaskGITTask, precompute_tokens
from compgen.training.tasks.maskgit_video import MaskGITVideoTask
from compgen.training.tasks.vq_tokenizer import VQTask

SPACE = shapes_space(num_colors=3)
PROMPTS = ["021", "110"]
TIMESTEP = 7
CODEBOOK_SIZE = 16
GRID = 7  # the tokenizer's grid for 28 px images
FRAMES = 2  # the video rows' clips: two frames of the same tokenizer's grid
LATENT_MEAN, LATENT_STD = [0.1, 0.0, -0.1, 0.2], [1.0, 0.5, 2.0, 1.0]

CONTRACTS = {
    "save-load": "save_pretrained -> from_pretrained: bit-identical outputs, safetensors only (test_model_contract)",
    "pipeline-save-load": "the pipeline's round trip: bit-identical images (test_model_contract)",
    "concept-order": "the concept order survives the config; a malformed tuple is refused (test_model_contract)",
    "guidance": "guidance_scale=1 is no guidance; the mix at weight 1 is the conditional prediction",
    "meta-device": "built on meta, every tensor on meta and a forward pass on meta (test_model_contract)",
    "pipeline-calls": "generator lists, latents, step callbacks (test_pipeline_conventions)",
    "tokenizer-required": "a pipeline without its tokenizer says so before any work (test_pipeline_conventions)",
    "gradient-checkpointing": "the same gradients, recomputed (test_pipeline_conventions)",
    "token-blocks": "older block weights load; diffusers' attention controls and fp8 casting (test_transformer_block)",
    "training-step-on-device": "every training step on the meta device (test_device_placement)",
    "training-step-compiles": "every training step compiles whole and matches eager (test_compiled_steps)",
}
"""Every contract a row may be excluded from, by name."""

PIPELINE_CONTRACTS = ("pipeline-save-load", "concept-order", "guidance", "pipeline-calls", "tokenizer-required")
"""The contracts that need a pipeline: a row without one lists them all in ``excluded``."""

BASE_CLASSES = {
    MaskedLatentTransformer: "the backbone GIVT and MAR share: no config of its own, covered by the givt and mar rows",
}
"""``ModelMixin`` classes of ``compgen.models`` that are no family (never built on their own), and why."""


def fixed(shape: tuple[int, ...], device: torch.device, seed: int = 1) -> torch.Tensor:
    """The same standard-normal tensor on every call, on ``device``."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device)


def doubled(tensor: torch.Tensor, inputs: ConceptInputs) -> torch.Tensor:
    """The model input for ``inputs``: doubled (conditional and null halves) under classifier-free guidance."""
    return torch.cat([tensor, tensor]) if inputs.do_classifier_free_guidance else tensor


def pipeline_model(pipe: DiffusionPipeline) -> torch.nn.Module:
    """The concept-conditioned model of a pipeline."""
    return pipe.unet if isinstance(pipe, TupleConditionedDDPMPipeline) else pipe.transformer


# --- the tokenizers ---------------------------------------------------------------------------------------------


def tokenizer() -> VQModel:
    """The tiny VQ tokenizer (seeded), the decoder of the token pipelines' rows."""
    torch.manual_seed(2)
    return build_vq_tokenizer(28, block_out_channels=(8, 8, 8), num_vq_embeddings=CODEBOOK_SIZE, vq_embed_dim=4,
                              norm_num_groups=4).eval()


def kl_tokenizer() -> AutoencoderKL:
    """The tiny KL tokenizer (seeded), Paper B's continuous tokenizer."""
    torch.manual_seed(1)
    return build_kl_tokenizer(28, block_out_channels=(8, 8, 8), latent_channels=4, norm_num_groups=4).eval()


def image_inputs(model: torch.nn.Module, prompts=PROMPTS, device: torch.device | None = None, **_) -> torch.Tensor:
    """A tokenizer's inputs for a batch of ``len(prompts)``: fixed images in [-1, 1]-ish, on ``device``."""
    return fixed((len(prompts), 3, 28, 28), device or torch.device("cpu")).clamp(-1, 1)


def tokenizer_forward(model: VQModel | AutoencoderKL, images: torch.Tensor) -> torch.Tensor:
    """The reconstruction (a KL tokenizer's from its posterior mode: deterministic)."""
    return model(images).sample


def vq_task(model: VQModel, images: torch.Tensor) -> VQTask:
    return VQTask(model, restart_every=1, total_steps=4, crop_size=16)


def kl_task(model: AutoencoderKL, images: torch.Tensor) -> KLTask:
    """Its crops and posterior noise are drawn on the CPU and moved."""
    return KLTask(model, crop_size=16)


# --- the concept-conditioned families ---------------------------------------------------------------------------


def unet(**options) -> TupleConditionedUNet2DModel:
    torch.manual_seed(0)
    return TupleConditionedUNet2DModel(SPACE.to_dict(), block_out_channels=(8, 16), norm_num_groups=4,
                                       **options).eval()


def full_unet() -> TupleConditionedUNet2DModel:
    return unet(conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE), concept_dropout=0.1)


def paper_layout_unet() -> TupleConditionedUNet2DModel:
    model = unet(block_type="paper", norm_type="batch")
    with torch.no_grad():  # BatchNorm statistics away from their initial values, so that the round trip checks them
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d) and module.running_mean.device.type != "meta":
                module.running_mean.uniform_(-0.2, 0.2)
                module.running_var.uniform_(0.5, 1.5)
    return model


def unet_pipeline(model: TupleConditionedUNet2DModel) -> DiffusionPipeline:
    return TupleConditionedDDPMPipeline(unet=model, scheduler=DDPMScheduler(num_train_timesteps=50))


def unet_forward(model: TupleConditionedUNet2DModel, inputs: ConceptInputs) -> torch.Tensor:
    sample = doubled(fixed((inputs.batch_size, 3, 28, 28), inputs.concepts.device), inputs)
    return model(sample, TIMESTEP, **inputs.model_kwargs).sample


def ddpm_task(model: TupleConditionedUNet2DModel, images: torch.Tensor) -> DDPMTask:
    return DDPMTask(model, DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction"),
                    eval_inference_steps=3)


def maskgit() -> MaskGITTransformer:
    torch.manual_seed(0)
    return MaskGITTransformer(SPACE.to_dict(), codebook_size=CODEBOOK_SIZE, grid_size=GRID, hidden_size=16,
                              num_layers=2, num_heads=2, conditioning="full",
                              continuous_concepts=shapes_continuous_concepts(SPACE), concept_dropout=0.1).eval()


def maskgit_pipeline(model: MaskGITTransformer) -> DiffusionPipeline:
    return MaskGITPipeline(vqvae=tokenizer(), transformer=model, scheduler=MaskGITScheduler(CODEBOOK_SIZE))


def maskgit_forward(model: MaskGITTransformer, inputs: ConceptInputs) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, CODEBOOK_SIZE + 1, (inputs.batch_size, GRID * GRID), generator=generator)
    return model(doubled(tokens.to(inputs.concepts.device), inputs), **inputs.model_kwargs).logits


def maskgit_task(jepa_weight: float) -> Callable[[MaskGITTransformer, torch.Tensor], MaskGITTask]:
    """MaskGIT's task, with the JEPA objective when ``jepa_weight`` > 0 (no model of its own: the same transformer)."""

    def build(model: MaskGITTransformer, images: torch.Tensor) -> MaskGITTask:
        vqvae = tokenizer()
        return MaskGITTask(model, vqvae, MaskGITScheduler(mask_token_id=model.mask_token_id),
                           precompute_tokens(vqvae, images), jepa_weight=jepa_weight,
                           jepa_layers=(1, 2) if jepa_weight else None, total_steps=4)

    return build


def latent_options() -> dict:
    return dict(concept_space=SPACE.to_dict(), latent_channels=4, grid_size=GRID, hidden_size=16, num_layers=2,
                num_heads=2, conditioning="full", continuous_concepts=shapes_continuous_concepts(SPACE),
                latent_mean=LATENT_MEAN, latent_std=LATENT_STD, concept_dropout=0.1)


def dit() -> TupleConditionedDiT:
    torch.manual_seed(0)
    model = TupleConditionedDiT(**latent_options()).eval()
    with torch.no_grad():  # the output layer starts at zero (DiT), blind to its inputs: give it weights
        model.output_projection.weight.normal_(std=0.1)
    return model


def dit_pipeline(model: TupleConditionedDiT) -> DiffusionPipeline:
    return TupleConditionedDiTPipeline(vqvae=tokenizer(), transformer=model,
                                       scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


def dit_kl_pipeline(model: TupleConditionedDiT) -> DiffusionPipeline:
    return TupleConditionedDiTPipeline(vqvae=None, vae=kl_tokenizer(), transformer=model,
                                       scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


def dit_forward(model: TupleConditionedDiT, inputs: ConceptInputs) -> torch.Tensor:
    latents = doubled(fixed((inputs.batch_size, 4, GRID, GRID), inputs.concepts.device), inputs)
    return model(latents, TIMESTEP, **inputs.model_kwargs).sample


def dit_task(make_tokenizer: Callable[[], VQModel | AutoencoderKL]) -> Callable[..., DiTTask]:
    """The DiT's task over a frozen tokenizer's latents (a VQ tokenizer's or a KL one's)."""

    def build(model: TupleConditionedDiT, images: torch.Tensor) -> DiTTask:
        frozen = make_tokenizer()
        scheduler = DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction", clip_sample=False)
        return DiTTask(model, frozen, scheduler, precompute_latents(frozen, images), eval_inference_steps=3)

    return build


def flow_dit_pipeline(model: TupleConditionedDiT) -> DiffusionPipeline:
    """The same DiT trained by flow matching: its pipeline integrates the velocity with Euler steps."""
    return TupleConditionedFlowDiTPipeline(vqvae=tokenizer(), transformer=model, scheduler=flow_matching_scheduler(50))


def flow_dit_kl_pipeline(model: TupleConditionedDiT) -> DiffusionPipeline:
    return TupleConditionedFlowDiTPipeline(vqvae=None, vae=kl_tokenizer(), transformer=model,
                                           scheduler=flow_matching_scheduler(50))


def flow_dit_task(make_tokenizer: Callable[[], VQModel | AutoencoderKL]) -> Callable[..., FlowMatchingDiTTask]:
    """The DiT's flow-matching task over a frozen tokenizer's latents (logit-normal noise levels: the other draw than
    the default, which ``test_flow_dit`` covers)."""

    def build(model: TupleConditionedDiT, images: torch.Tensor) -> FlowMatchingDiTTask:
        frozen = make_tokenizer()
        return FlowMatchingDiTTask(model, frozen, flow_matching_scheduler(50), precompute_latents(frozen, images),
                                   weighting_scheme="logit_normal", eval_inference_steps=3)

    return build


def givt() -> GIVTTransformer:
    torch.manual_seed(0)
    model = GIVTTransformer(**latent_options(), num_mixtures=2).eval()
    with torch.no_grad():  # the output head starts at zero, blind to its inputs: give it weights
        model.head.weight.normal_(std=0.1)
    return model


def givt_pipeline(model: GIVTTransformer) -> DiffusionPipeline:
    return GIVTPipeline(vqvae=tokenizer(), transformer=model, scheduler=MaskGITScheduler(0))


def masked_latent_inputs(inputs: ConceptInputs) -> tuple[torch.Tensor, torch.Tensor]:
    device = inputs.concepts.device
    latents = doubled(fixed((inputs.batch_size, 4, GRID, GRID), device), inputs)
    mask = doubled(fixed((inputs.batch_size, GRID * GRID), device, seed=2) > 0, inputs)
    return latents, mask


def givt_forward(model: GIVTTransformer, inputs: ConceptInputs) -> torch.Tensor:
    return model(*masked_latent_inputs(inputs), **inputs.model_kwargs).means


def givt_task(model: GIVTTransformer, images: torch.Tensor) -> GIVTTask:
    """GIVT over the VQ tokenizer's latents (its masks drawn on the CPU, gathered by index)."""
    vqvae = tokenizer()
    return GIVTTask(model, vqvae, MaskGITScheduler(mask_token_id=0), precompute_latents(vqvae, images))


def mar() -> MARTransformer:
    torch.manual_seed(0)
    model = MARTransformer(**latent_options(), head_width=16, head_depth=1).eval()
    with torch.no_grad():  # the head's adaLN-Zero layers start at zero, blind to the condition: give them weights
        for parameter in model.head.parameters():
            if parameter.device.type == "meta" or not parameter.any():
                parameter.normal_(std=0.1)
    return model


def mar_pipeline(model: MARTransformer) -> DiffusionPipeline:
    return MARPipeline(vqvae=tokenizer(), transformer=model, scheduler=MaskGITScheduler(0),
                       head_scheduler=DDPMScheduler(num_train_timesteps=50, clip_sample=False))


def mar_forward(model: MARTransformer, inputs: ConceptInputs) -> torch.Tensor:
    return model(*masked_latent_inputs(inputs), **inputs.model_kwargs).conditions


def mar_task(model: MARTransformer, images: torch.Tensor) -> MARTask:
    vqvae = tokenizer()
    ddpm = DDPMScheduler(num_train_timesteps=50, prediction_type="v_prediction", clip_sample=False)
    return MARTask(model, vqvae, MaskGITScheduler(mask_token_id=0), ddpm, precompute_latents(vqvae, images))


# --- the video families: the same models over the tokens of every frame -----------------------------------------


def clips_of(images: torch.Tensor) -> torch.Tensor:
    """uint8 clips ``(N, FRAMES, 28, 28, 3)`` for the video tasks from the table's uint8 images: each image, then the
    same image mirrored (the batches' row ``index`` still picks a clip)."""
    return torch.stack([images, images.flip(2)], dim=1)


def maskgit_video() -> MaskGITTransformer:
    torch.manual_seed(0)
    return MaskGITTransformer(SPACE.to_dict(), codebook_size=CODEBOOK_SIZE, grid_size=GRID, hidden_size=16,
                              num_layers=2, num_heads=2, concept_dropout=0.1, num_frames=FRAMES).eval()


def maskgit_video_pipeline(model: MaskGITTransformer) -> DiffusionPipeline:
    return MaskGITVideoPipeline(vqvae=tokenizer(), transformer=model, scheduler=MaskGITScheduler(CODEBOOK_SIZE))


def maskgit_video_forward(model: MaskGITTransformer, inputs: ConceptInputs) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, CODEBOOK_SIZE + 1, (inputs.batch_size, FRAMES, GRID, GRID), generator=generator)
    return model(doubled(tokens.to(inputs.concepts.device), inputs), **inputs.model_kwargs).logits


def maskgit_video_task(model: MaskGITTransformer, images: torch.Tensor) -> MaskGITVideoTask:
    """MaskGIT + JEPA over the clips' space-time tokens, block masks spanning time."""
    vqvae = tokenizer()
    return MaskGITVideoTask(model, vqvae, MaskGITScheduler(mask_token_id=model.mask_token_id),
                            precompute_tokens(vqvae, clips_of(images)), jepa_layers=(1, 2), total_steps=4,
                            mask_type="block")


def flow_dit_video() -> TupleConditionedDiT:
    torch.manual_seed(0)
    options = latent_options() | dict(conditioning="quantized", continuous_concepts=None, num_frames=FRAMES)
    model = TupleConditionedDiT(**options).eval()
    with torch.no_grad():  # the output layer starts at zero (DiT), blind to its inputs: give it weights
        model.output_projection.weight.normal_(std=0.1)
    return model


def flow_dit_video_pipeline(model: TupleConditionedDiT) -> DiffusionPipeline:
    return FlowDiTVideoPipeline(vqvae=tokenizer(), transformer=model, scheduler=flow_matching_scheduler(50))


def flow_dit_video_forward(model: TupleConditionedDiT, inputs: ConceptInputs) -> torch.Tensor:
    latents = doubled(fixed((inputs.batch_size, 4, FRAMES, GRID, GRID), inputs.concepts.device), inputs)
    return model(latents, TIMESTEP, **inputs.model_kwargs).sample


def flow_dit_video_task(model: TupleConditionedDiT, images: torch.Tensor) -> FlowDiTVideoTask:
    frozen = tokenizer()
    return FlowDiTVideoTask(model, frozen, flow_matching_scheduler(50), precompute_latents(frozen, clips_of(images)),
                            eval_inference_steps=3)


# --- the table --------------------------------------------------------------------------------------------------

TaskBuilder = Callable[[torch.nn.Module, torch.Tensor], TrainingTask]


@dataclass(frozen=True)
class Family:
    """One row of the table."""

    id: str
    model_class: type
    """The ``ModelMixin`` class the row covers (``test_every_exported_model_class_has_a_row``)."""
    model: Callable[[], torch.nn.Module]
    """A tiny model, seeded: the same weights on every call."""
    forward: Callable[[torch.nn.Module, object], torch.Tensor]
    """The model's output on :attr:`inputs` (doubled under guidance), on its device."""
    tasks: dict[str, TaskBuilder]
    """Its training task(s), by variant name (``""``: the plain one), from the model and uint8 images (N, 28, 28, 3)."""
    pipeline: Callable[[torch.nn.Module], DiffusionPipeline] | None = None
    """The model's sampling pipeline around it; ``None`` where it has none (its ``excluded`` says why)."""
    inputs: Callable[..., object] = prepare_concept_inputs
    """``(model, prompts, device=..., **sampling options)`` -> what :attr:`forward` takes: the concept inputs."""
    excluded: dict[str, str] = field(default_factory=dict)
    """Contract name (a key of ``CONTRACTS``) -> why it does not apply to this row."""

    @property
    def conditioned(self) -> bool:
        """Whether the model takes concepts."""
        return self.inputs is prepare_concept_inputs

    def task_cases(self) -> list:
        return [pytest.param(self, variant, id=f"{self.id}-{variant}" if variant else self.id)
                for variant in self.tasks]


NO_PIPELINE = ("a tokenizer has no sampling pipeline and takes no concepts: it is the encoder and decoder inside the "
               "token pipelines, whose rows decode through it")
NO_BLOCKS = "diffusers' own convolutional autoencoder: no token-transformer blocks"

TABLE = [
    Family("tuple-unet", TupleConditionedUNet2DModel, full_unet, unet_forward, {"": ddpm_task}, unet_pipeline,
           excluded={"tokenizer-required": "samples pixels: no tokenizer to decode through",
                     "token-blocks": "convolutional: no token-transformer blocks"}),
    Family("tuple-unet-paper-layout", TupleConditionedUNet2DModel, paper_layout_unet, unet_forward, {"": ddpm_task},
           unet_pipeline,
           excluded={"guidance": "Paper A's layout as the paper trains it, without concept dropout: no null concepts, "
                                 "so guidance_scale != 1 is refused",
                     "tokenizer-required": "samples pixels: no tokenizer to decode through",
                     "gradient-checkpointing": "BatchNorm: a recomputed forward would update its statistics twice, "
                                               "so enable_gradient_checkpointing refuses",
                     "token-blocks": "convolutional: no token-transformer blocks"}),
    Family("maskgit", MaskGITTransformer, maskgit, maskgit_forward,
           {"": maskgit_task(0.0), "jepa": maskgit_task(0.6)}, maskgit_pipeline),
    Family("tuple-dit", TupleConditionedDiT, dit, dit_forward, {"": dit_task(tokenizer)}, dit_pipeline),
    Family("tuple-dit-kl", TupleConditionedDiT, dit, dit_forward, {"": dit_task(kl_tokenizer)}, dit_kl_pipeline),
    Family("flow-dit", TupleConditionedDiT, dit, dit_forward, {"": flow_dit_task(tokenizer)}, flow_dit_pipeline),
    Family("flow-dit-kl", TupleConditionedDiT, dit, dit_forward, {"": flow_dit_task(kl_tokenizer)},
           flow_dit_kl_pipeline),
    Family("maskgit-video", MaskGITTransformer, maskgit_video, maskgit_video_forward, {"": maskgit_video_task},
           maskgit_video_pipeline),
    Family("flow-dit-video", TupleConditionedDiT, flow_dit_video, flow_dit_video_forward, {"": flow_dit_video_task},
           flow_dit_video_pipeline),
    Family("givt", GIVTTransformer, givt, givt_forward, {"": givt_task}, givt_pipeline),
    Family("mar", MARTransformer, mar, mar_forward, {"": mar_task}, mar_pipeline),
    Family("vq-tokenizer", VQModel, tokenizer, tokenizer_forward, {"": vq_task}, inputs=image_inputs,
           excluded={**dict.fromkeys(PIPELINE_CONTRACTS, NO_PIPELINE), "token-blocks": NO_BLOCKS,
                     "gradient-checkpointing": "diffusers' VQModel does not support it (its "
                                               "_supports_gradient_checkpointing is False); tokenizers train small"}),
    Family("kl-tokenizer", AutoencoderKL, kl_tokenizer, tokenizer_forward, {"": kl_task}, inputs=image_inputs,
           excluded={**dict.fromkeys(PIPELINE_CONTRACTS, NO_PIPELINE), "token-blocks": NO_BLOCKS}),
]
"""Every family, one row each (the DiT has a row per tokenizer kind: its pipeline saves and reloads either; and a row
per objective, DDPM and flow matching: one model class, two pipelines and tasks; the video rows sample clips of
``FRAMES`` frames)."""

FAMILIES = [pytest.param(family, id=family.id) for family in TABLE]
TASK_CASES = [case for family in TABLE for case in family.task_cases()]
"""``(family, task variant)`` for the training-step contracts."""


def require(family: Family, contract: str) -> None:
    """Skip the test with the row's reason where ``contract`` does not apply to ``family``."""
    assert contract in CONTRACTS, contract
    if contract in family.excluded:
        pytest.skip(f"{family.id} is excluded from {contract}: {family.excluded[contract]}")


def predict(family: Family, model: torch.nn.Module, prompts=PROMPTS, **kwargs) -> torch.Tensor:
    """The row's forward pass on fixed inputs for ``prompts``, without gradients."""
    with torch.no_grad():
        return family.forward(model, family.inputs(model, prompts, **kwargs))
