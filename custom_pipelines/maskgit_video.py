"""Hub entry file for :class:`compgen.MaskGITVideoPipeline` (requires ``pip install compgen``).

Load a saved pipeline with plain diffusers::

    from diffusers import DiffusionPipeline
    from diffusers.utils import export_to_gif

    pipe = DiffusionPipeline.from_pretrained(
        "path/or/hub-id", custom_pipeline="path/to/custom_pipelines/maskgit_video.py", trust_remote_code=True
    )
    export_to_gif(pipe("111").frames[0], "111.gif")

On the Hub, upload this file as ``maskgit_video.py`` next to ``model_index.json`` and pass
``custom_pipeline="maskgit_video"``.
"""

from compgen.pipelines.maskgit_video import MaskGITVideoPipeline

__all__ = ["MaskGITVideoPipeline"]
