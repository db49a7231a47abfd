"""YOLOX detection family (sizes nano, tiny, s, m, l, x)."""
