"""The `xlayer` command line: one module per command."""
