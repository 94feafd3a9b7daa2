"""Hub entry file for :class:`compgen.TupleConditionedFlowDiTPipeline` (requires ``pip install compgen``).

Load a saved pipeline with plain diffusers::

    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(
        "path/or/hub-id", custom_pipeline="path/to/custom_pipelines/flow_dit.py", trust_remote_code=True
    )
    image = pipe("111").images[0]

On the Hub, upload this file as ``flow_dit.py`` next to ``model_index.json`` and pass ``custom_pipeline="flow_dit"``.
"""

from compgen.pipelines.flow_dit import TupleConditionedFlowDiTPipeline

__all__ = ["TupleConditionedFlowDiTPipeline"]
