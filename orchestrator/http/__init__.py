"""The gateway over HTTP: per-session OpenAI Chat Completions, OpenAI Responses and Anthropic
Messages endpoints over the TITO gateway, each session a tree of token-exact calls (docs/harness.md)."""
