"""
mcpx as an OAuth client of the remote servers it reaches.

  - L{mcpx.auth.metadata}: the pure rules of the MCP authorization specification, per
    revision: where protected-resource and authorization-server metadata are looked for,
    what makes them acceptable, which scopes to ask for, PKCE, the C{iss} check.
  - L{mcpx.auth.flow}: the HTTP half, on treq: discovery, client registration, the
    authorization URL, the code exchange and refresh.
  - L{mcpx.auth.store}: tokens and registered clients in the state directory.
"""
