"""Chat-platform bridges: implementations of :class:`parley.core.bridge.ChatBridge`."""
