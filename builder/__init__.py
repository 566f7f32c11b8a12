"""Versioned builds: join -> audio normalise -> VAD -> variants -> consent -> write."""
