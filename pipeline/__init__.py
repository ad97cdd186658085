"""MultiAgent-OPD reproduction pipeline: plain functions, one per stage, plus a CLI."""

import os as _os

__version__ = "0.1.0"

# Offline by default: no telemetry from the tools the stages drive.
for _var, _value in {
    "DVC_NO_ANALYTICS": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "GX_ANALYTICS_ENABLED": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
}.items():
    _os.environ.setdefault(_var, _value)
