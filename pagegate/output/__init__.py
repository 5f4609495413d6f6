"""What a run writes: Dolma documents and markdown and failure-ledger records, committed
through the workspace."""
