"""whestbench."""
