"""The tiny profile's base model, built from scratch: a BPE tokenizer, a tiny Qwen3, LM
pre-training on the passages, scripted role demonstrations and copy-forcing reading texts,
then a format warm-up (`recipe.train_base_model`); and the behaviour check every base model
gets on dev (`behaviour.measure_behaviour`). A consumer of agents, policy and retrieval."""
