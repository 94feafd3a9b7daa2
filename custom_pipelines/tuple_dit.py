"""Hub entry file for :class:`compgen.TupleConditionedDiTPipeline` (requires ``pip install compgen``).

Load a saved pipeline with plain diffusers::

    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(
        "path/or/hub-id", custom_pipeline="path/to/custom_pipelines/tuple_dit.py", trust_remote_code=True
    )
    image = pipe("111").images[0]

On the Hub, upload this file as ``tuple_dit.py`` next to ``model_index.json`` and pass ``custom_pipeline="tuple_dit"``.
"""

from compgen.pipelines.tuple_dit import TupleConditionedDiTPipeline

__all__ = ["TupleConditionedDiTPipeline"]
