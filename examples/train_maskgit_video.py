"""Train MaskGIT over a frame tokenizer's space-time tokens on concept-graph clips (Paper B's discrete video model),
with the JEPA target by default (``--jepa_weight 0``: plain MaskGIT).

    accelerate launch examples/train_maskgit_video.py --preset cpu-quick --output_dir outputs/maskgit-video

The same command as ``python -m compgen.train maskgit-video``: flags, presets and checks live in the recipe,
``compgen.recipes.maskgit_video`` (``--help`` lists them).
"""

from compgen.recipes.maskgit_video import main

if __name__ == "__main__":
    main()
