"""App projects rendered from templates/ (Android and iOS share the renderer)."""
