"""The private evaluation service (`redvox serve`): scores a model on the full build,
withheld voices included, and gives back aggregates only. The platform serves the
model itself, on loopback, from the maintainer's serving command template; researchers
name a model, never an address. See cli.py for the commands, app.py for the HTTP API."""
