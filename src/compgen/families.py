"""The model families, one row each: the table compgen's lists of models, pipelines and tasks are derived from.

A row names (by dotted path, so that reading the table imports nothing heavy) the family's model, its pipeline and the
pipeline component that holds the model, its training task, the example script that trains it and the Hub entry file
in ``custom_pipelines/``. ``compgen``'s lazy exports and re-scoring's pipelines (``compgen.analysis.rescore``) are
built from it; ``tests/unit/test_families.py`` holds the tasks' exports, the contract tests' table
(``tests/model_families.py``), ``custom_pipelines/``, the examples and ARCHITECTURE.md to it. A new family is a row
here plus its model, pipeline, task, script, Hub entry file, test row and docs (ARCHITECTURE.md, "A new model family").
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
    script: str
    """The example script that trains it (relative to the repository)."""
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
                "compgen.training.tasks.ddpm.DDPMTask", "examples/train_tuple_unet.py",
                "custom_pipelines/tuple_ddpm.py"),
    ModelFamily("maskgit", "compgen.models.maskgit_transformer.MaskGITTransformer",
                "compgen.pipelines.maskgit.MaskGITPipeline", "transformer",
                "compgen.training.tasks.maskgit.MaskGITTask", "examples/train_maskgit_jepa.py",
                "custom_pipelines/maskgit.py"),
    ModelFamily("tuple-dit", "compgen.models.tuple_dit.TupleConditionedDiT",
                "compgen.pipelines.tuple_dit.TupleConditionedDiTPipeline", "transformer",
                "compgen.training.tasks.dit.DiTTask", "examples/train_dit.py", "custom_pipelines/tuple_dit.py"),
    ModelFamily("flow-dit", "compgen.models.tuple_dit.TupleConditionedDiT",
                "compgen.pipelines.flow_dit.TupleConditionedFlowDiTPipeline", "transformer",
                "compgen.training.tasks.flow_matching.FlowMatchingDiTTask", "examples/train_flow_dit.py",
                "custom_pipelines/flow_dit.py"),
    ModelFamily("givt", "compgen.models.givt_transformer.GIVTTransformer", "compgen.pipelines.givt.GIVTPipeline",
                "transformer", "compgen.training.tasks.givt.GIVTTask", "examples/train_givt.py",
                "custom_pipelines/givt.py"),
    ModelFamily("mar", "compgen.models.mar_transformer.MARTransformer", "compgen.pipelines.mar.MARPipeline",
                "transformer", "compgen.training.tasks.mar.MARTask", "examples/train_mar.py",
                "custom_pipelines/mar.py"),
)


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
