"""RedVox reference evaluator: `python evaluation/evaluate.py --help` in the Hub repo,
`redvox evaluate --help` in the builder package. Both run the same code, in redvox_eval/."""

import sys
from pathlib import Path

if __package__:
    from .redvox_eval.cli import cli
else:
    # Run as a script from the Hub copy: the logic is the package beside this file.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from redvox_eval.cli import cli

__all__ = ["cli"]

if __name__ == "__main__":
    cli()
