"""Train MAR (a per-token diffusion head over a tokenizer's continuous latents).

    accelerate launch examples/train_mar.py --preset cpu-quick --output_dir outputs/mar

The same command as ``python -m compgen.train mar``: flags, presets and checks live in the recipe,
``compgen.recipes.mar`` (``--help`` lists them).
"""

from compgen.recipes.mar import main

if __name__ == "__main__":
    main()
