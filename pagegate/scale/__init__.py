"""Scale-out: shard a large listing by estimated pages, watch the shard runs, report."""
