"""Everything specwatch exports, rendered from the sources' States: the Prometheus families of the
sidecar (collector) and of fleet mode (fleet_collector), and the /api/v1/status documents (status)."""
