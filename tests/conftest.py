"""Shared pytest fixtures. Plugins live in small modules beside this file."""

pytest_plugins = ["s3_fixture", "cache_servers", "xdist_order"]
