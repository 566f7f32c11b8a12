"""Representativeness, Hub staging (card, parquet, loading script, evaluator), verification and push."""
