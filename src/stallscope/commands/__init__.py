"""One module per CLI command, each with ``main(argv=None) -> int`` (thin: parse, probe, analyse, render)."""
