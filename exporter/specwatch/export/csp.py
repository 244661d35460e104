"""The Content-Security-Policy of what specwatch serves: the page carries it in a meta tag
(export/page.py) and the server sends it as a header with every response (serve/http_server.py).
Its own module so that the server has it without loading the page's renderer before a page is asked for."""

#: Nothing fetched, no script, inline styles and data: images only.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
)
