"""Train the diffusion transformer over a tokenizer's latents by flow matching.

    accelerate launch examples/train_flow_dit.py --preset cpu-quick --output_dir outputs/flow-dit

The same command as ``python -m compgen.train flow-dit``: flags, presets and checks live in the recipe,
``compgen.recipes.flow_dit`` (``--help`` lists them).
"""

from compgen.recipes.flow_dit import main

if __name__ == "__main__":
    main()
