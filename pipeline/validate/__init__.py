"""Great Expectations suites (splits, masks) run as pipeline stages."""

import os

# Before any submodule imports great_expectations: no usage analytics leave the machine.
os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
