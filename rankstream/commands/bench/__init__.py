"""`rankstream bench ...`: the benchmarks, one JSON object each."""
