"""Long-running processes: the online worker, the batch worker and the evaluator."""
