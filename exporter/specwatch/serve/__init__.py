"""The running process: the poll loop and what it publishes (service), the capped HTTP server
(http_server), config reload in place (reload) and one log line per change (change_log)."""
