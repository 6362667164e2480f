"""The edge tier's own parts: k3s sites with one small GPU or none (sections, the node budget, the GPU stack)."""
