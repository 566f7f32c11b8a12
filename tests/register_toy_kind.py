"""A pytest plugin (`-p register_toy_kind`, tests/ on the path) that registers the toy
noise kind before collection, as a package adding its own kind would."""

import toy_noise_kind

from redvox import noise

noise.register_kind(toy_noise_kind)
