"""Pure functions from a run record to what a report states: report facts, verdicts, checklist and
recommendations (`report`) and training-loop stall analysis (`training`). Nothing here measures
or prints.
"""
