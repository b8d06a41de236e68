"""Finding the fastest loader (`ss.tune`). The search strategy is pure decisions over an evaluator
(`search`, NOTE [tuning strategy]) working with the pipeline's profile, knobs and budgets (`space`),
one trial at a time (`trial`): the region of the worker curve (`regions`), the final race of
finalists in interleaved rounds (`race`) and the pick with its confidence (`confidence`).
`persistence` decides what the race cannot see (persistent_workers, start method); `tuner` runs it
all on real DataLoaders and records what it measured (`stallscope.analysis.tune_rules` turns
that into advice); `autoconfig` holds the hardware-aware defaults and `ss.make_loader`. The one
snippet builder for code and YAML is a renderer (`stallscope.render.loader_code`).
"""
