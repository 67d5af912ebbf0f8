"""Queue backends, one module each (imported lazily by ``queue/registry.py``)."""
