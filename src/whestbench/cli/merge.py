"""placeholder during development."""
COMMANDS = []
