"""
Every setting declared once, resolved in layers, each value remembering its source.

    - L{declarations}: the L{Setting<declarations.Setting>} records, one per setting;
    - L{kinds} and L{durations}: how each kind of value is read and written;
    - L{paths}: where the config file and the state directory are;
    - L{config} and L{servers}: the JSON config file and its upstream servers;
    - L{resolve}: default < file < environment < flag, with provenance;
    - L{load}: all of that in one call, for the command line and the twistd plugin;
    - L{render} and L{docs}: C{mcpx settings} output and C{docs/configuration.md}.
"""
