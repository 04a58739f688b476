"""Kafka client properties (a ``--command-config`` file, as kafka-configs.sh and kafka-acls.sh take) turned
into a kafka-python admin client: ``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config`` (PLAIN and
SCRAM login modules' ``username``/``password``; OAUTHBEARER with Kafka's default unsecured login, whose
``unsecuredLogin*`` options build the token), ``ssl.truststore.location``/``ssl.keystore.location`` (PEM files),
``ssl.key.password`` and ``ssl.endpoint.identification.algorithm``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..storage.properties import load_properties


def admin_kwargs(command_config: Path | None) -> dict[str, Any]:
    """kafka-python keyword arguments for the client properties in ``command_config`` (none: PLAINTEXT)."""
    if command_config is None:
        return {}
    from ..broker.security.sasl import parse_jaas

    props = {k: str(v) for k, v in load_properties(command_config).items()}
    kwargs: dict[str, Any] = {}
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    kwargs["security_protocol"] = protocol
    if protocol in ("SSL", "SASL_SSL"):
        for key in ("ssl.truststore.type", "ssl.keystore.type"):
            if props.get(key, "PEM").upper() != "PEM":
                raise click.ClickException(f"{key}: kafkalog's clients read PEM stores only")
        if "ssl.truststore.location" in props:
            kwargs["ssl_cafile"] = props["ssl.truststore.location"]
        if "ssl.keystore.location" in props:
            kwargs["ssl_certfile"] = props["ssl.keystore.location"]
            kwargs["ssl_keyfile"] = props["ssl.keystore.location"]
        if "ssl.key.password" in props:
            kwargs["ssl_password"] = props["ssl.key.password"]
        kwargs["ssl_check_hostname"] = props.get("ssl.endpoint.identification.algorithm", "https") != ""
    if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
        kwargs["sasl_mechanism"] = props.get("sasl.mechanism", "GSSAPI").upper()
        jaas = props.get("sasl.jaas.config")
        if jaas is None:
            raise click.ClickException(f"{command_config}: a SASL client needs sasl.jaas.config")
        _, options = parse_jaas(jaas, "sasl.jaas.config")
        if kwargs["sasl_mechanism"] == "OAUTHBEARER":
            kwargs["sasl_oauth_token_provider"] = _unsecured_token_provider(options)
            return kwargs
        kwargs["sasl_plain_username"] = options.get("username")
        kwargs["sasl_plain_password"] = options.get("password")
    return kwargs


def _unsecured_token_provider(options: dict[str, str]) -> Any:
    """A kafka-python token provider minting Kafka's unsecured login token (a fresh one for each login)."""
    from kafka.net.sasl.oauth import AbstractTokenProvider

    from ..broker.security.oauthbearer import unsecured_login_token
    from ..errors import InvalidConfigurationError

    try:
        unsecured_login_token(options)  # a bad option fails here, as a usage error, not at connect time
    except InvalidConfigurationError as e:
        raise click.ClickException(f"sasl.jaas.config: {e}") from None

    class UnsecuredLogin(AbstractTokenProvider):
        def token(self) -> str:
            return unsecured_login_token(options)[0]

        def extensions(self) -> dict[str, str]:
            return unsecured_login_token(options)[1]

    return UnsecuredLogin()


def admin_client(bootstrap: str, command_config: Path | None, client_id: str, timeout_ms: int = 30000):
    from kafka.admin import KafkaAdminClient

    try:
        return KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id=client_id,
            request_timeout_ms=timeout_ms,
            **admin_kwargs(command_config),
        )
    except Exception as e:  # kafka-python raises NoBrokersAvailable, AuthenticationFailedError, ...
        raise click.ClickException(f"Cannot connect to {bootstrap}: {type(e).__name__}: {e}") from None
