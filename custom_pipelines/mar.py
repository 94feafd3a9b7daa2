"""Hub entry file for :class:`compgen.MARPipeline` (requires ``pip install compgen``).

Load a saved pipeline with plain diffusers::

    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(
        "path/or/hub-id", custom_pipeline="path/to/custom_pipelines/mar.py", trust_remote_code=True
    )
    image = pipe("111").images[0]

On the Hub, upload this file as ``mar.py`` next to ``model_index.json`` and pass ``custom_pipeline="mar"``.
"""

from compgen.pipelines.mar import MARPipeline

__all__ = ["MARPipeline"]
