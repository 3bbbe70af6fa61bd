"""Why did throughput drop: drop windows, the causes scored on the metric tables, incidents."""
