"""Input formats as plug-ins: one module per format, found through :mod:`.registry`.

Each format (an :class:`~.base.InputFormat`) owns its extensions, plans units from its files
(whole files, line-aligned byte ranges, row groups, groups of files, tar shards) and reads a
unit into records with their locations. See ``docs/formats.md``.
"""
