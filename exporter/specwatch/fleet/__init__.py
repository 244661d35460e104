"""Fleet mode's source: the grouped PromQL queries (queries), the Prometheus client (client), the
answers grouped into per-replica window views (grouping), the evaluator over them (evaluator) and
its State (state), and the same over a past range (backtest). Knows nothing of the sidecar."""
