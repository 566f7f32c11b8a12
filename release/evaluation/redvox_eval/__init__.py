"""Logic of the reference evaluator; imports nothing from `redvox` so the Hub copy runs alone."""
