"""Where a sample's time goes (`ss.stages`).

Parent side: `probe` (the entry point) runs `workers` (the instrumented loader in real
workers), `inprocess` (augmentation differential, cProfile hot spots) and `storage`
(cold vs warm page cache); `table` turns the raw totals into the stage table; `results`
holds the dataclasses. Worker side: `recorder` (stage recorder, markers, wrappers) and
`known_calls` (read/decode inside well-known libraries), `callees` (the rows broken out of
`other (__getitem__)`). NOTE [stage timing] in `recorder.py` explains the design.
"""
