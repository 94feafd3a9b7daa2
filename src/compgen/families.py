"""The model families, one row each: the table compgen's lists of models, pipelines and tasks are derived from.

A row names (by dotted path, so that reading the table imports nothing heavy) the family's model, its pipeline and the
pipeline component that holds the model, its training task, the recipe that trains it (``compgen.recipes.<name>``, run
as ``python -m compgen.train <family>``), the example script over the recipe and the Hub entry file in
``custom_pipelines/``. ``compgen``'s lazy exports, re-scoring's pipelines (``compgen.analysis.rescore``) and the
recipes' names (:func:`recipes`, for ``compgen.train`` and study files) are built from it;
``tests/unit/test_families.py`` holds the tasks' exports, the contract tests' table (``tests/model_families.py``),
``custom_pipelines/``, the examples and ARCHITECTURE.md to it. A new family is a row here plus its model, pipeline,
task, recipe, script, Hub entry file, test row and docs (ARCHITECTURE.md, "A new model family").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelFamily:
    """One generator family: where its parts live."""

    name: str
    model: str
    """The ``ModelMixin`` class, ``module.Class``."""
    pipeline: str
    """The ``DiffusionPipeline`` class, ``module.Class``."""
    denoiser: str
    """The pipeline component that holds :attr:`model` (``unet`` or ``transformer``)."""
    task: str
    """The training task, ``module.Class``."""
    recipe: str
    """The module that trains it (``compgen.recipes.<name>``: flags, presets, checks, model, task and ``main``)."""
    script: str
    """The example script over :attr:`recipe` for ``accelerate launch`` (relative to the repository)."""
    hub_entry: str
    """The Hub entry file for ``custom_pipeline=`` loading (relative to the repository)."""

    @staticmethod
    def split(path: str) -> tuple[str, str]:
        """``("module", "Class")`` of a dotted ``module.Class`` path."""
        module, _, name = path.rpartition(".")
        return module, name


FAMILIES: tuple[ModelFamily, ...] = (
    ModelFamily("tuple-unet", "compgen.models.tuple_unet.TupleConditionedUNet2DModel",
                "compgen.pipelines.tuple_ddpm.TupleConditionedDDPMPipeline", "unet",
                "compgen.training.tasks.ddpm.DDPMTask", "compgen.recipes.tuple_unet",
                "examples/train_tuple_unet.py", "custom_pipelines/tuple_ddpm.py"),
    ModelFamily("maskgit", "compgen.models.maskgit_transformer.MaskGITTransformer",
                "compgen.pipelines.maskgit.MaskGITPipeline", "transformer",
                "compgen.training.tasks.maskgit.MaskGITTask", "compgen.recipes.maskgit",
                "examples/train_maskgit_jepa.py", "custom_pipelines/maskgit.py"),
    ModelFamily("maskgit-video", "compgen.models.maskgit_transformer.MaskGITTransformer",
                "compgen.pipelines.maskgit_video.MaskGITVideoPipeline", "transformer",
                "compgen.training.tasks.maskgit_video.MaskGITVideoTask", "compgen.recipes.maskgit_video",
                "examples/train_maskgit_video.py", "custom_pipelines/maskgit_video.py"),
    ModelFamily("tuple-dit", "compgen.models.tuple_dit.TupleConditionedDiT",
                "compgen.pipelines.tuple_dit.TupleConditionedDiTPipeline", "transformer",
                "compgen.training.tasks.dit.DiTTask", "compgen.recipes.tuple_dit",
                "examples/train_dit.py", "custom_pipelines/tuple_dit.py"),
    ModelFamily("flow-dit", "compgen.models.tuple_dit.TupleConditionedDiT",
                "compgen.pipelines.flow_dit.TupleConditionedFlowDiTPipeline", "transformer",
                "compgen.training.tasks.flow_matching.FlowMatchingDiTTask", "compgen.recipes.flow_dit",
                "examples/train_flow_dit.py", "custom_pipelines/flow_dit.py"),
    ModelFamily("flow-dit-video", "compgen.models.tuple_dit.TupleConditionedDiT",
                "compgen.pipelines.flow_dit_video.FlowDiTVideoPipeline", "transformer",
                "compgen.training.tasks.flow_matching.FlowDiTVideoTask", "compgen.recipes.flow_dit_video",
                "examples/train_flow_dit_video.py", "custom_pipelines/flow_dit_video.py"),
    ModelFamily("givt", "compgen.models.givt_transformer.GIVTTransformer", "compgen.pipelines.givt.GIVTPipeline",
                "transformer", "compgen.training.tasks.givt.GIVTTask", "compgen.recipes.givt",
                "examples/train_givt.py", "custom_pipelines/givt.py"),
    ModelFamily("mar", "compgen.models.mar_transformer.MARTransformer", "compgen.pipelines.mar.MARPipeline",
                "transformer", "compgen.training.tasks.mar.MARTask", "compgen.recipes.mar",
                "examples/train_mar.py", "custom_pipelines/mar.py"),
)


@dataclass(frozen=True)
class Recipe:
    """A training command: its name (``python -m compgen.train <name>``), its module and its example script."""

    name: str
    module: str
    script: str


TOKENIZER_RECIPE = Recipe("tokenizer", "compgen.recipes.tokenizer", "examples/train_vq_tokenizer.py")
"""A tokenizer trained on its own (VQ or KL), to share between the token families' runs."""


def recipes() -> dict[str, Recipe]:
    """``{name: recipe}`` of every family and the tokenizer, the names ``compgen.train`` and study files take."""
    return {family.name: Recipe(family.name, family.recipe, family.script) for family in FAMILIES} | {
        TOKENIZER_RECIPE.name: TOKENIZER_RECIPE}


def recipe_of_script(path: str) -> Recipe | None:
    """The recipe whose example script is ``path`` (``examples/train_dit.py`` under any directory), or ``None``:
    study files and their records that name an example script read as the recipe it runs."""
    tail = "/".join(path.replace("\\", "/").split("/")[-2:])
    return next((recipe for recipe in recipes().values() if recipe.script == tail), None)


def family_exports() -> dict[str, str]:
    """``{public name: module}`` of every family's model and pipeline, for ``compgen``'s lazy exports."""
    exports = {}
    for family in FAMILIES:
        for path in (family.model, family.pipeline):
            module, name = ModelFamily.split(path)
            exports[name] = module
    return exports


def pipelines() -> dict[str, tuple[str, str]]:
    """``{pipeline class name: (module, denoiser component)}`` of every family, for re-scoring an export."""
    return {ModelFamily.split(f.pipeline)[1]: (ModelFamily.split(f.pipeline)[0], f.denoiser) for f in FAMILIES}
