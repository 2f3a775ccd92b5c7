# -*- test-case-name: tests.daemon.test_process -*-
"""From resolved settings to what the service tree is built from."""

from __future__ import annotations

import os
from collections.abc import Mapping

from mcpx.daemon.activation import (
    activated_endpoints,
    inherited_descriptors,
    listen_with_activation,
)
from mcpx.daemon.gate import unauthenticated_exposure
from mcpx.daemon.sdnotify import SYSTEMD_VARIABLES, notifier_from
from mcpx.daemon.service import DaemonConfig
from mcpx.settings.errors import SettingsError
from mcpx.settings.paths import state_dir
from mcpx.settings.resolve import Settings
from mcpx.settings.servers import ServersConfig, passthrough_twice
from mcpx.settings.state_keys import read_state_keys
from mcpx.store.config import store_target


def daemon_config(
    settings: Settings, servers: ServersConfig, environ: Mapping[str, str]
) -> DaemonConfig:
    """
    What the daemon is built from.  Under systemd, the notification socket and the
    passed listening sockets are read from C{environ}
    (L{mcpx.daemon.sdnotify}, L{mcpx.daemon.activation}), and left out of the
    environment the upstreams inherit.

    @raise SettingsError: the settings would serve tools to the network without
        authentication (L{unauthenticated_exposure}), or pass the same server through
        twice (L{passthrough_twice}), or C{store.url} cannot be used
        (L{mcpx.store.config.postgres_target}), or the C{proto.stateKeyFile} named
        cannot (L{mcpx.settings.state_keys.read_state_keys}).
    """
    config = DaemonConfig(
        state_dir=state_dir(environ),
        listen=listen_with_activation(
            settings.strings("daemon.listen"), activated_endpoints(inherited_descriptors())
        ),
        settings=settings,
        servers=servers,
        environ={k: v for k, v in environ.items() if k not in SYSTEMD_VARIABLES},
        notifier=notifier_from(environ, os.getpid()),
        store=store_target(
            settings.string("store.url"), settings.string("store.passwordFile"), environ
        ),
    )
    refusal = unauthenticated_exposure(
        config.auth,
        config.exposed_endpoints(),
        settings.boolean("daemon.allowUnauthenticatedNetwork"),
    )
    if refusal is not None:
        raise SettingsError(refusal)
    twice = passthrough_twice(servers, settings.strings("mcp.passthrough"))
    if twice is not None:
        raise SettingsError(twice)
    key_file = settings.string("proto.stateKeyFile")
    if key_file:
        # Checked before anything starts, so a bad file is a settings error, not a crash.
        read_state_keys(key_file)
    return config
