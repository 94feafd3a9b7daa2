"""Train the DiT by flow matching over a frame tokenizer's latents on concept-graph clips (Paper B's continuous video
model).

    accelerate launch examples/train_flow_dit_video.py --preset cpu-quick --output_dir outputs/flow-dit-video

The same command as ``python -m compgen.train flow-dit-video``: flags, presets and checks live in the recipe,
``compgen.recipes.flow_dit_video`` (``--help`` lists them).
"""

from compgen.recipes.flow_dit_video import main

if __name__ == "__main__":
    main()
