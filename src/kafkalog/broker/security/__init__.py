"""The broker's security: TLS listeners, SASL authentication, the request context a handler authorizes with.

Kafka's layout: a listener's security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL) decides how a
connection is authenticated; the result is a principal (``User:<name>``), which every request carries into the
handlers through :data:`context.CURRENT`.
"""
