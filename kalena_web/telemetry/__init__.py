"""Telemetry: node agents' tokens, the WebSocket ingest of their samples and actions (DESIGN §1, §12)."""
