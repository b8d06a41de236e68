"""Finding the fastest loader: the search strategy, pure decisions over an evaluator (`search`),
the tuner that runs it on real DataLoaders (`tuner`), hardware-aware defaults and `make_loader`
(`autoconfig`) and the code and YAML a pick is emitted as (`emit`).
"""
