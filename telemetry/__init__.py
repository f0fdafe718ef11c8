"""What every process and serve reports: the Prometheus metrics (each defined once,
`prometheus_metrics`) and structured JSON logs on stderr (`structured_log`).
"""
