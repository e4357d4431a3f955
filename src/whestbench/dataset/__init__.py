"""Dataset layer: schema, metadata, writer, loader, merge/combine, verify, hub (imports compute and work, never the CLI)."""
