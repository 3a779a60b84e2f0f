"""Fine-tune Gemma 4 with LoRA on Cloud TPU and serve it: the cookbook package."""
