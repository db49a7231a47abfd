"""Code the Darknet lineage of anchor-based detectors shares (yolo3, yolo4): Darknet blocks and
backbones, the anchor head, its decode and postprocess, the anchor-based loss, the family base
and the Darknet ``.weights`` reader."""
