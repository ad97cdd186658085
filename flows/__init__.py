"""Prefect flows and deployments that run the DVC stages on work pools."""
