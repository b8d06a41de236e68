"""Where a sample's time goes (`ss.stages`): the parent-side probe that runs the loader and builds
the stage table (`probe`) and the worker-side recorder and wrappers that time each stage where
it runs (`recorder`).
"""
