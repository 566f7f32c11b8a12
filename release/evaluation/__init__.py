"""The reference evaluator: judge model outputs, report the RedVox taxonomy and its
breakdowns, validate the judge against human labels.

This folder ships verbatim in the Hub repo as `evaluation/` and runs there without
the `redvox` package: `python evaluation/evaluate.py --help`. The logic lives in
`redvox_eval/`; `evaluate.py` is the command line of both copies.
"""
