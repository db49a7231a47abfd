"""PP-OCR sizes. ``v4``: PP-OCRv4 mobile (PaddleOCR ``configs/det/PP-OCRv4/PP-OCRv4_mobile_det.yml``:
PP-LCNetV3 x0.75, RSE-FPN 96, DB head; ``configs/rec/PP-OCRv4/ch_PP-OCRv4_rec.yml``: PP-LCNetV3
x0.95, SVTR neck dims 120 / depth 2 / hidden 120 / 8 heads, CTC head; recognition input 48 x 320).
``tiny`` is libreyolo's own test size (no published weights): the same architecture, narrow.
"""

from __future__ import annotations

# size: (det scale, neck channels, rec scale, SVTR dims, hidden, depth, heads, rec input (h, w))
VARIANTS: dict[str, tuple[float, int, float, int, int, int, int, tuple[int, int]]] = {
    "tiny": (0.25, 32, 0.25, 32, 32, 1, 2, (48, 96)),
    "v4": (0.75, 96, 0.95, 120, 120, 2, 8, (48, 320)),
}

# Deployed (re-parameterised) parameter counts of the published PP-OCRv4 mobile inference models,
# counted from the weight tensors of the ONNX exports that ship inside the rapidocr_onnxruntime
# 1.4.4 wheel (ch_PP-OCRv4_det_infer.onnx, ch_PP-OCRv4_rec_infer.onnx; BatchNorm running statistics
# left out; the recogniser with its 6625-way CTC head: 6623 characters + space + blank).
PUBLISHED_DEPLOYED = {"v4": {"det": None, "rec": None}}
