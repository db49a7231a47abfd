"""Model-free tensor ops: box conversions, IoU, NMS, letterbox."""
