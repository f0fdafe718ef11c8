"""`rankstream eval ...`: the papers' experiments, learning from clicks, the champion test."""
