"""Train the diffusion transformer (DDPM) over a tokenizer's latents, Paper B's continuous end of the ladder.

    accelerate launch examples/train_dit.py --preset cpu-quick --output_dir outputs/dit

The same command as ``python -m compgen.train tuple-dit``: flags, presets and checks live in the recipe,
``compgen.recipes.tuple_dit`` (``--help`` lists them).
"""

from compgen.recipes.tuple_dit import main

if __name__ == "__main__":
    main()
