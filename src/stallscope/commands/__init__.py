"""One module per CLI command, each with ``main(argv=None) -> int`` (thin: parse, probe,
analyse, render).

``_common`` holds what they share: the parser with the TARGET and output options, the progress
bar, the console summary (through ``render.console``), one-sentence errors and the clean exit.
"""
