# -*- test-case-name: tests.settings.test_render -*-
"""
Settings shown to a person (an aligned table) or to a program (JSON).

Nothing here shows a secret: servers are rendered from their C{redacted()} forms.
"""

from __future__ import annotations

from typing import Any

from mcpx.settings.declarations import Setting
from mcpx.settings.kinds import Kind
from mcpx.settings.resolve import Settings
from mcpx.settings.servers import RemoteServer, ServersConfig, redact_url


def shown_value(setting: Setting, value: object) -> str:
    """A value as text, with a word instead of nothing for an empty one."""
    text = setting.to_text(value)
    if text:
        return text
    if setting.kind is Kind.REVISION:
        return "(unset)"
    if setting.kind is Kind.STRING:
        return "(empty)"
    return "(none)"


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join(
            [*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[-1]]
        ).rstrip()
        for row in rows
    ]


def render_table(
    settings: Settings, servers: ServersConfig, *, state_dir: str, looked_at: str | None = None
) -> str:
    """
    Every setting with its value and source, a section at a time, then the policy and the
    servers.

    @param state_dir: the state directory, shown for reference.
    @param looked_at: the config file's path looked for, named when there is none there.
    """
    config = servers.origin
    if servers.path is None and looked_at is not None:
        config = f"{looked_at} (no such file: the configuration shipped with mcpx is used)"
    lines = [f"config: {config}", f"state:  {state_dir}", ""]
    rows: list[tuple[str, ...]] = [("SETTING", "VALUE", "SOURCE")]
    # Grouped by section (pool., daemon., ...), each in the order it is declared.
    sections: dict[str, list[tuple[str, ...]]] = {}
    for r in settings:
        section = r.setting.name.split(".", 1)[0]
        sections.setdefault(section, []).append(
            (r.setting.name, shown_value(r.setting, r.value), r.source.describe())
        )
    table = _table(rows + [row for grouped in sections.values() for row in grouped])
    lines.append(table[0])
    at = 1
    for grouped in sections.values():
        lines.append("")
        lines += table[at : at + len(grouped)]
        at += len(grouped)
    policy = settings.policy()
    lenient = [rev.value for rev in policy.precedence if rev in policy.lenient]
    lines += [
        "",
        "effective precedence (first wins): " + ", ".join(r.value for r in policy.precedence),
        "lenient revisions: " + (", ".join(lenient) or "none, every revision is strict"),
        "",
    ]
    if not len(servers):
        lines.append("servers: none configured")
    else:
        lines.append(f"servers ({len(servers)}):")
        server_rows: list[tuple[str, ...]] = []
        for name in servers:
            server = servers[name]
            if isinstance(server, RemoteServer):
                kind, target = "remote", redact_url(server.url)
            else:
                kind, target = "stdio", server.command
            extra = f"auth {server.auth.type.value}" if server.auth is not None else ""
            server_rows.append(("  " + name, kind, server.scope.value, target, extra))
        lines += _table(server_rows)
    return "\n".join(lines) + "\n"


def render_json(settings: Settings, servers: ServersConfig, *, state_dir: str) -> dict[str, Any]:
    """
    Everything L{render_table} shows, for a program.

    C{config} is the config file's path, or C{null} when the configuration shipped
    with mcpx is in use (C{configOrigin} then says C{"default config"}).
    """
    return {
        "settings": [
            {
                "name": r.setting.name,
                "value": r.setting.to_json(r.value),
                "source": r.source.to_json(),
                "env": r.setting.env,
                "flag": r.setting.flag,
            }
            for r in settings
        ],
        "policy": settings.policy().to_json(),
        "servers": servers.redacted(),
        "config": servers.path,
        "configOrigin": servers.origin,
        "stateDir": state_dir,
    }
