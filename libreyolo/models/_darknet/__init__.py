"""Code the Darknet lineage shares (yolo2, yolo3, yolo4; yolo1 uses the conv, the ``[local]``
layer and the ``.weights`` layout): Darknet blocks and backbones, the anchor head, its decode and
postprocess, the anchor-based loss, the family base and the Darknet ``.weights`` reader."""
