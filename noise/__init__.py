"""Distracting-audio conditions: one module per kind, sample_params(rng, ...) then render(params, banks)."""
