"""The command line: the Typer app, one module per command, and the Hydra entry of
`attnseq train` (docs/internals/command_line.md)."""
