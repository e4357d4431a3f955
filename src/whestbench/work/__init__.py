"""Work layer: units, the plan, the resume ledger and the loop that runs units."""

CHECKPOINT_EVERY_S = 60.0
"""The default seconds between checkpoints inside a unit (``--checkpoint-every``, SPEC §5); here, free
of numpy, so the CLI can show it without importing the work itself."""
