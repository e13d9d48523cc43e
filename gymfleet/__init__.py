"""gymfleet: agent environments and an asynchronous RL orchestrator for LLM agents."""
__version__ = "0.1.0"
