import sys

from pipeline.engine.memory import cap_kernel_cache

cap_kernel_cache()  # before the first bfloat16 matmul (docs/profile.md#memory)

from pipeline.cli import main  # noqa: E402

sys.exit(main())
