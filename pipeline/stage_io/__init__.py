"""What the stages share besides their own work: the inputs they open (`inputs`), where the splits
and corpus come from (`sources`), and what the model-writing stages log (`run_logging`)."""
