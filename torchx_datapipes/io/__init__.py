"""Input planning, record formats, part writers and the output manifest."""
