"""Train Paper A's tuple-conditioned U-Net (DDPM) on a concept-graph split, evaluating as it trains.

    accelerate launch examples/train_tuple_unet.py --preset quickstart --concept_modulation film --output_dir out

The same command as ``python -m compgen.train tuple-unet``: flags, presets and checks live in the recipe,
``compgen.recipes.tuple_unet`` (``--help`` lists them).
"""

from compgen.recipes.tuple_unet import main

if __name__ == "__main__":
    main()
