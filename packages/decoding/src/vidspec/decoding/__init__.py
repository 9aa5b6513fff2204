"""vidspec.decoding."""
