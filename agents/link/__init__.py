"""The agent's link to the control plane: message schema (:mod:`agents.link.protocol`), the
bounded on-disk buffer of unacknowledged messages (:mod:`agents.link.buffer`) and the WebSocket
client with jittered reconnects (:mod:`agents.link.client`)."""
