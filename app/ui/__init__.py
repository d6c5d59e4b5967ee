"""Windows and widgets: they bind to the services and Qt models in ``app``; no HTTP here."""
