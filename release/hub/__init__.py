"""The Hub release: representativeness, staging (card, shards, loading script,
evaluator copy), verify, push and withdraw (`redvox release`)."""
