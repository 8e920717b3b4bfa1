"""The built OCI image, unpacked and run (``make image-test``; skipped without OPSLOOP_IMAGE)."""
