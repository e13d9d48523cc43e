"""Inference engines behind one Protocol: the embedded TransformersEngine and the VLLMEngine HTTP client."""
