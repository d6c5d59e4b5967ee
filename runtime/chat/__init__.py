"""Model-family knowledge shared by the service and remote engines: chat templates, tool formats."""
