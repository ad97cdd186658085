import os
import sys

# oneDNN keeps a compiled kernel for every matmul shape it has seen (1,024 by default); the engine's
# row counts change every step, and those kernels grew a stage's memory by 0.3-0.5 GB
# (docs/profile.md#memory). Read when the first bfloat16 matmul runs, so setting it here is in time.
os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "256")

from pipeline.cli import main

sys.exit(main())
