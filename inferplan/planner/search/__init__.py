"""The capacity search: the plan() front door (plan.py), the disaggregated search, and what both share (core.py)."""
