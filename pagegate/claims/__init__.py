"""Claims on groups: runs that share a workspace split its work instead of doubling it.

A run claims a group before working on it, with an object made by an atomic create in
the workspace, and keeps its claims alive with one heartbeat object of its own. Another
run that finds a group claimed leaves it for later and takes it over only once the
holder's heartbeat has stood still for a whole lease (docs/operations.md, "Runs that
share a workspace").

- `lease`: the timing rules, pure;
- `board`: the claim and heartbeat objects over a Store, blocking;
- `holder`: one run's claims at run time: the heartbeat loop and the write fence.

Which group a run works on next, and how it waits for the groups others hold, is
pagegate.ocr.turns: it runs groups, so it sits with the rest of a run.
"""
