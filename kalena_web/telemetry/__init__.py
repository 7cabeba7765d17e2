"""Telemetry: node agents' tokens, the WebSocket ingest of their samples and actions (docs/design.md §1, §12)."""
