"""Readers of the raw inputs into validated records; no audio processing here."""
