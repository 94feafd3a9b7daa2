"""Hub entry file for :class:`compgen.FlowDiTVideoPipeline` (requires ``pip install compgen``).

Load a saved pipeline with plain diffusers::

    from diffusers import DiffusionPipeline
    from diffusers.utils import export_to_gif

    pipe = DiffusionPipeline.from_pretrained(
        "path/or/hub-id", custom_pipeline="path/to/custom_pipelines/flow_dit_video.py", trust_remote_code=True
    )
    export_to_gif(pipe("111").frames[0], "111.gif")

On the Hub, upload this file as ``flow_dit_video.py`` next to ``model_index.json`` and pass
``custom_pipeline="flow_dit_video"``.
"""

from compgen.pipelines.flow_dit_video import FlowDiTVideoPipeline

__all__ = ["FlowDiTVideoPipeline"]
