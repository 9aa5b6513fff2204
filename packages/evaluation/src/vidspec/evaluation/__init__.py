"""vidspec.evaluation."""
