# -*- test-case-name: tests.daemon.test_process -*-
"""From resolved settings to what the service tree is built from."""

from __future__ import annotations

from collections.abc import Mapping

from mcpx.daemon.gate import unauthenticated_exposure
from mcpx.daemon.service import DaemonConfig
from mcpx.settings.errors import SettingsError
from mcpx.settings.paths import state_dir
from mcpx.settings.resolve import Settings
from mcpx.settings.servers import ServersConfig


def daemon_config(
    settings: Settings, servers: ServersConfig, environ: Mapping[str, str]
) -> DaemonConfig:
    """
    @raise SettingsError: the settings would serve tools to the network without
        authentication (L{unauthenticated_exposure}).
    """
    config = DaemonConfig(
        state_dir=state_dir(environ),
        listen=settings.strings("daemon.listen"),
        settings=settings,
        servers=servers,
        environ=dict(environ),
    )
    refusal = unauthenticated_exposure(
        config.auth,
        config.exposed_endpoints(),
        settings.boolean("daemon.allowUnauthenticatedNetwork"),
    )
    if refusal is not None:
        raise SettingsError(refusal)
    return config
