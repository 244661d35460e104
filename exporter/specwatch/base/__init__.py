"""What every layer may use: durations and sizes (units), NaN-safe JSON (jsonsafe), logging setup
(logsetup) and the deadline-guarded HTTP connection both sources poll through (httpconn, speaking
HTTP/1.1 through http1)."""
