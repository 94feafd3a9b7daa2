"""compgen.analysis: the offline commands over finished runs, above the training loop in the layers.

Re-scoring an export or a checkpoint (``rescore``), results folders and the claims their READMEs make
(``results_folder``, ``claims``), the mechanism measures (``mechanism``), hidden capabilities (``hidden_capabilities``),
the scorers' stress suite (``stress_suite``), the U-Net's gate and the training diagnostics (``gate_diagnostics``,
``training_diagnostics``) and the toy-model fit (``toy_model_fit``). Each is a ``python -m compgen.analysis.<name>``
command; what scores images while a model trains stays in :mod:`compgen.evaluation`.
"""
