"""Everything specwatch exports, rendered from the View a source published (specwatch.view): the
Prometheus families (collector), the /api/v1/status document (status) and the page (page)."""
